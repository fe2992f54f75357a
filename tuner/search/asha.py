"""ASHA: asynchronous successive halving (Li et al., 2018)."""

from __future__ import annotations

import math
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

    def acts_at(self, sweep: Any) -> frozenset[int]:
        """Ray's rungs (``_Bracket``: grace x factor^k up to max_t, every bracket's among them):
        a trial is compared at the first report at or past each, so that is the epoch sent.
        Both integers around a rung, in case its floating-point value lands a hair above one."""
        marks, k = set(), 0
        while (rung := self.grace_period * self.reduction_factor**k) <= sweep.max_epochs:
            marks |= {math.floor(rung), math.ceil(rung)}
            k += 1
        return frozenset(marks)

    def rungs(self, sweep: Any) -> list[int]:
        marks, epoch = [], self.grace_period
        while epoch < sweep.max_epochs:
            marks.append(int(epoch))
            epoch *= self.reduction_factor
        return marks
