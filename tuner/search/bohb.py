"""BOHB (Falkner et al., 2018): its own searcher (hpbandster's kernel density model, through
Ray's TuneBOHB) with its own HyperBand scheduler; the two go together. Needs hpbandster and
ConfigSpace (tuner[bohb])."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.errors import ConfigError
from tuner.search.base import TIME_ATTR, Scheduler, Searcher
from tuner.search.hyperband import HyperBandScheduler
from tuner.strict import fail


class BohbSearcher(Searcher):
    name: Literal["bohb"]

    refuses_conditional: ClassVar[str | None] = "its ConfigSpace space is built flat"
    compares_several: ClassVar[bool] = False
    needs_scheduler: ClassVar[str | None] = "bohb"

    def check(self, sweep: Any) -> None:
        if any(spec.is_quantized for spec in sweep.param_specs().values()):
            raise fail("space.params: bohb drops quantization; use choice instead of quniform/qloguniform")

    def build(self, sweep: Any, max_concurrent: int) -> Any:
        try:
            import ConfigSpace  # noqa: F401
            import hpbandster  # noqa: F401
            from ray.tune.search.bohb import TuneBOHB
        except ImportError as error:
            raise ConfigError(
                f"searcher 'bohb' needs the optional packages hpbandster and ConfigSpace ({error}); "
                "install them with: pip install 'tuner[bohb]'"
            ) from None
        return TuneBOHB(seed=sweep.seed)


class BohbScheduler(Scheduler):
    """HyperBand for BOHB (Falkner et al., 2018); needs the bohb searcher."""

    name: Literal["bohb"]
    reduction_factor: float = Field(3, gt=1)

    pauses_trials: ClassVar[bool] = True
    own_searcher: ClassVar[tuple[dict[str, Any], str] | None] = (
        {"name": "bohb"},
        "scheduler bohb goes with BOHB's own searcher",
    )
    legend: ClassVar[str] = HyperBandScheduler.legend

    def build(self, sweep: Any) -> Any:
        from tuner.search.tune_hyperband import BohbHyperBand  # Tune's, stopping trials no bracket will run again

        return BohbHyperBand(time_attr=TIME_ATTR, max_t=sweep.max_epochs, reduction_factor=self.reduction_factor)

    def rungs(self, sweep: Any) -> list[int]:
        return HyperBandScheduler.rungs(self, sweep)  # type: ignore[arg-type]
