"""Synchronous HyperBand (Li et al., 2017): brackets that pause trials and resume the best.
Ray Tune's scheduler with tuner's guard is tuner/search/tune_hyperband.py."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.search.base import TIME_ATTR, Scheduler


class HyperBandScheduler(Scheduler):
    """Synchronous HyperBand (Li et al., 2017); pauses and resumes trials."""

    name: Literal["hyperband"]
    reduction_factor: float = Field(3, gt=1)

    pauses_trials: ClassVar[bool] = True
    legend: ClassVar[str] = "dotted lines are HyperBand's rungs"

    def build(self, sweep: Any) -> Any:
        from tuner.search.tune_hyperband import HyperBand  # Tune's, stopping trials no bracket will run again

        return HyperBand(time_attr=TIME_ATTR, max_t=sweep.max_epochs, reduction_factor=self.reduction_factor)

    def rungs(self, sweep: Any) -> list[int]:
        marks, epoch = [], sweep.max_epochs / self.reduction_factor
        while epoch >= 1:
            marks.append(int(round(epoch)))
            epoch /= self.reduction_factor
        return sorted(set(marks))
