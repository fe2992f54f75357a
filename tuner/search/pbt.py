"""Population based training (Jaderberg et al., 2017) and population based bandits (PB2,
Parker-Holder et al., 2020): a population that copies the better trials' checkpoints
(exploit) and perturbs their parameters (explore); they explore by themselves, from the
random searcher's starting points."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tuner.errors import ConfigError
from tuner.search import spaces
from tuner.search.base import TIME_ATTR, Scheduler
from tuner.strict import fail


class _Population(Scheduler):
    perturbation_interval: int = Field(1, ge=1)  # epochs between exploit/explore
    quantile_fraction: float = Field(0.25, gt=0, le=0.5)

    clones_checkpoints: ClassVar[bool] = True  # keeps every checkpoint: an exploit may clone an old one
    takes_conditional: ClassVar[bool] = False
    why_not_conditional: ClassVar[str] = "mutates parameters every trial has"

    def check(self, sweep: Any) -> None:
        if sweep.searcher.name != "random":
            raise fail(
                "searcher.name: {scheduler} explores by itself and takes the random searcher, but got {searcher!r}",
                scheduler=self.name,
                searcher=sweep.searcher.name,
            )


class PbtScheduler(_Population):
    """Population based training (Jaderberg et al., 2017)."""

    name: Literal["pbt"]
    resample_probability: float = Field(0.25, ge=0, le=1)
    mutations: dict[str, Any] | None = None  # default: every non-constant space param

    own_searcher: ClassVar[tuple[dict[str, Any], str]] = (
        {"name": "random"},
        "scheduler pbt explores by itself from random starting points",
    )
    legend: ClassVar[str] = "stars mark PBT's exploits, where a trial continued from a better trial's checkpoint"

    def searched_elsewhere(self) -> dict[str, Any]:
        return dict(self.mutations or {})

    def check(self, sweep: Any) -> None:
        super().check(sweep)
        for name, spec in spaces.parse_params("scheduler.mutations", self.searched_elsewhere()).items():
            if spec.kind in ("constant", "grid"):
                raise fail(
                    "scheduler.mutations.{name}: pbt mutates with a distribution or a choice, but got {dist} {args}",
                    name=name,
                    dist=spec.kind,
                    args=list(spec.args),
                )
        if not (self.mutations or any(s.kind not in ("constant", "grid") for s in sweep.param_specs().values())):
            raise fail(
                "scheduler.mutations: pbt needs something to mutate: give mutations or a space with a distribution"
            )

    def build(self, sweep: Any) -> Any:
        from ray.tune.schedulers import PopulationBasedTraining

        return PopulationBasedTraining(
            time_attr=TIME_ATTR,
            perturbation_interval=self.perturbation_interval,
            hyperparam_mutations=self.mutated(sweep),
            quantile_fraction=self.quantile_fraction,
            resample_probability=self.resample_probability,
        )

    def mutated(self, sweep: Any) -> dict[str, Any]:
        """The configured mutations, else every non-constant parameter of the space."""
        if self.mutations:
            specs = {k: spaces.parse_param(v) for k, v in self.mutations.items()}
        else:
            specs = {k: s for k, s in sweep.param_specs().items() if s.kind not in ("constant", "grid")}
        return spaces.to_param_space(specs)


class Pb2Scheduler(_Population):
    """Population based bandits (Parker-Holder et al., 2020): PBT whose explore step is a
    GP bandit over the bounds of the space's numeric parameters. Needs GPy (tuner[pb2])."""

    name: Literal["pb2"]

    own_searcher: ClassVar[tuple[dict[str, Any], str]] = (
        {"name": "random"},
        "scheduler pb2 explores by itself from random starting points",
    )
    legend: ClassVar[str] = "stars mark PB2's exploits, where a trial continued from a better trial's checkpoint"

    def check(self, sweep: Any) -> None:
        super().check(sweep)
        if not any(s.kind in spaces.RANGE_KINDS for s in sweep.param_specs().values()):
            raise fail(
                "space.params: pb2 explores within the bounds of numeric parameters (uniform, loguniform, quniform, "
                "qloguniform, randint), but the space has none; use pbt for choices"
            )

    def build(self, sweep: Any) -> Any:
        try:
            import GPy  # noqa: F401
            import sklearn  # noqa: F401
            from ray.tune.schedulers.pb2 import PB2
        except ImportError as error:
            raise ConfigError(
                f"scheduler 'pb2' needs the optional packages GPy and scikit-learn ({error}); "
                "install them with: pip install 'tuner[pb2]'"
            ) from None
        return PB2(
            time_attr=TIME_ATTR,
            perturbation_interval=self.perturbation_interval,
            hyperparam_bounds=self.bounds(sweep),
            quantile_fraction=self.quantile_fraction,
        )

    def bounds(self, sweep: Any) -> dict[str, list[float]]:
        """[low, high] of every numeric parameter of the space: where PB2's bandit explores."""
        found = {}
        for name, spec in sweep.param_specs().items():
            if spec.kind in spaces.RANGE_KINDS:
                high = spec.args[1] - 1 if spec.kind == "randint" else spec.args[1]
                found[name] = [spec.args[0], high]
        return found
