"""ASHA: asynchronous successive halving (Li et al., 2018)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.search.base import TIME_ATTR, Scheduler


class AshaScheduler(Scheduler):
    """Asynchronous successive halving (Li et al., 2018)."""

    name: Literal["asha"]
    grace_period: int = Field(1, ge=1)  # epochs before a trial can be stopped
    reduction_factor: float = Field(2, gt=1)
    brackets: int = Field(1, ge=1)

    legend: ClassVar[str] = (
        "dotted lines are ASHA's rungs, where a trial continues only if it is in the top 1/reduction_factor"
    )

    def build(self, sweep: Any) -> Any:
        from ray.tune.schedulers import ASHAScheduler

        return ASHAScheduler(
            time_attr=TIME_ATTR,
            max_t=sweep.max_epochs,
            grace_period=self.grace_period,
            reduction_factor=self.reduction_factor,
            brackets=self.brackets,
        )

    def rungs(self, sweep: Any) -> list[int]:
        marks, epoch = [], self.grace_period
        while epoch < sweep.max_epochs:
            marks.append(int(epoch))
            epoch *= self.reduction_factor
        return marks
