"""HyperOpt's TPE through Ray's HyperOptSearch; a conditional space becomes HyperOpt's
nested choice (tuner/search/tune_hyperopt.py)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.search import spaces
from tuner.search.base import Searcher


class HyperOptSearcher(Searcher):
    name: Literal["hyperopt"]
    n_initial_points: int = Field(4, ge=0)  # random trials before TPE takes over

    compares_several: ClassVar[bool] = False

    def build(self, sweep: Any, max_concurrent: int) -> Any:
        from ray.tune.search.hyperopt import HyperOptSearch

        kwargs = {"n_initial_points": self.n_initial_points, "random_state_seed": sweep.seed}
        if spaces.is_conditional(sweep.param_specs()):
            from tuner.search.tune_hyperopt import FlatHyperOptSearch

            return FlatHyperOptSearch(sweep.param_specs(), **kwargs)
        return HyperOptSearch(**kwargs)
