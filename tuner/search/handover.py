"""An Optuna sampler that searches with a Gaussian process for the first trials and with TPE
after them (``searcher: {name: optuna, sampler: gp, tpe_after: N}``).

A GP models a smooth function from few trials better than TPE (benchmarks/README.md, search
quality), but its fit grows with the cube of the trials it has seen; a sweep bounded by
time rather than trials (``trials.time_budget_s``) may run more than a GP fits quickly.
From trial ``after`` on TPE proposes, from every trial the study holds, the GP's included.
Which one proposes is fixed by the trial's number, so a trial's parameters all come from one.
"""

from __future__ import annotations

from typing import Any

from optuna.samplers import BaseSampler


class GpThenTpe(BaseSampler):
    def __init__(self, gp: BaseSampler, tpe: BaseSampler, after: int) -> None:
        self.gp, self.tpe, self.after = gp, tpe, after

    def _for(self, trial: Any) -> BaseSampler:
        return self.gp if trial.number < self.after else self.tpe

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return self._for(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return self._for(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        return self._for(trial).sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Any, trial: Any) -> None:
        self._for(trial).before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self._for(trial).after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.gp.reseed_rng()
        self.tpe.reseed_rng()
