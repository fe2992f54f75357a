"""PASHA (Bohdal, Balles, Wistuba, Ermis, Archambeau and Zappella, ICLR 2023): ASHA that
starts with a low maximum of epochs and raises it one rung at a time, only while the
ranking of the trials in its top two rungs is still changing. Where rankings settle early
the sweep spends far fewer epochs than ASHA for a similar best trial (Syne Tune's paper:
about 3x less time on NAS-Bench-201). Ray Tune's side is tuner/search/tune_pasha.py.

This is the stopping variant, as tuner's ASHA is Ray's stopping ASHA: a trial that reaches
the current maximum rung ends there (paused trials would hold the searcher's slots).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.search.base import Scheduler
from tuner.strict import fail


class PashaScheduler(Scheduler):
    """Progressive ASHA: the maximum rung grows while the top two rungs rank trials differently."""

    name: Literal["pasha"]
    grace_period: int = Field(1, ge=1)  # the first rung, in epochs
    reduction_factor: float = Field(3, gt=1)
    # two values closer than this count as a tie when rankings are compared; None: estimated
    # from the sweep's own learning curves (the paper's 90th percentile of crossing gaps)
    epsilon: float | None = Field(None, ge=0)

    legend: ClassVar[str] = (
        "dotted lines are PASHA's rungs; it raises its top rung only while the top two rank trials differently"
    )

    def build(self, sweep: Any) -> Any:
        from tuner.search.tune_pasha import Pasha

        return Pasha(
            metric=sweep.metric,
            mode=sweep.mode,
            levels=levels(self.grace_period, self.reduction_factor, sweep.max_epochs),
            reduction_factor=self.reduction_factor,
            epsilon=self.epsilon,
        )

    def check(self, sweep: Any) -> None:
        if self.grace_period >= sweep.max_epochs:
            raise fail(
                "scheduler.grace_period: PASHA needs two rungs, so grace_period < train.epochs ({epochs}), "
                "but got {grace}",
                epochs=sweep.max_epochs,
                grace=self.grace_period,
            )

    def rungs(self, sweep: Any) -> list[int]:
        return levels(self.grace_period, self.reduction_factor, sweep.max_epochs)[:-1]


def levels(grace: int, eta: float, max_epochs: int) -> list[int]:
    """The rungs, in epochs: ``grace * eta**k`` below ``max_epochs``, then ``max_epochs``."""
    marks, epoch = [], float(grace)
    while int(epoch) < max_epochs:
        if not marks or int(epoch) > marks[-1]:
            marks.append(int(epoch))
        epoch *= eta
    return [*marks, max_epochs]
