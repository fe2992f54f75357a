"""FIFO: every trial runs all its epochs; the only scheduler for several objectives."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from tuner.search.base import Scheduler


class FifoScheduler(Scheduler):
    name: Literal["fifo"] = "fifo"

    compares_several: ClassVar[bool] = True  # it compares none
    min_epochs: ClassVar[int] = 1

    def build(self, sweep: Any) -> Any:
        from ray.tune.schedulers import FIFOScheduler

        return FIFOScheduler()

    def acts_at(self, sweep: Any) -> frozenset[int]:
        return frozenset()  # it acts on no report
