"""The median stopping rule (Golovin et al., 2017)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.search.base import TIME_ATTR, Scheduler


class MedianScheduler(Scheduler):
    """Median stopping rule (Golovin et al., 2017)."""

    name: Literal["median"]
    grace_period: int = Field(1, ge=1)
    min_samples_required: int = Field(3, ge=1)

    min_epochs: ClassVar[int] = 1
    legend: ClassVar[str] = "the dotted line is where the median rule starts stopping trials"

    def build(self, sweep: Any) -> Any:
        from ray.tune.schedulers import MedianStoppingRule

        return MedianStoppingRule(
            time_attr=TIME_ATTR, grace_period=self.grace_period, min_samples_required=self.min_samples_required
        )

    def rungs(self, sweep: Any) -> list[int]:
        return [int(self.grace_period)] if self.grace_period < sweep.max_epochs else []
