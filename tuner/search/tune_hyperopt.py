"""Ray's HyperOptSearch for a conditional space: HyperOpt samples a conditional choice as
its nested ``hp.choice`` (``{optimizer: {sgd: {lr: ...}}}``, each branch's parameters
named by their path, ``optimizer/sgd/lr``); the trial gets plain names."""

from __future__ import annotations

from typing import Any

from ray.tune.search.hyperopt import HyperOptSearch

from tuner.search import spaces


class FlatHyperOptSearch(HyperOptSearch):
    def __init__(self, specs: dict[str, spaces.ParamSpec], **kwargs: Any):
        super().__init__(**kwargs)
        self.specs = specs

    def suggest(self, trial_id: str) -> Any:
        config = super().suggest(trial_id)
        return spaces.flatten(config, self.specs) if isinstance(config, dict) else config
