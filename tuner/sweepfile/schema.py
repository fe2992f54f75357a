"""The sweep file's schema: ``SweepConfig``, the sections it is made of, and the checks
that run when it is validated (tuner/sweepfile/checks.py; the search methods' own in
tuner/search/). Errors read ``file:line: field.path: what is wrong, but got value``
(tuner/sweepfile/load.py places them).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from tuner.data.config import DataConfig
from tuner.errors import ConfigError
from tuner.folder import remote
from tuner.search import registry, spaces
from tuner.search.registry import SchedulerConfig, SearcherConfig
from tuner.strict import Strict, custom, fail
from tuner.sweepfile import checks
from tuner.sweepfile.sections import (
    METRICS,
    MODEL_CHOICE,
    CheckpointConfig,
    CnnConfig,
    FactoryConfig,
    ModelConfig,
    Objective,
    OpenOptions,
    ScalingConfig,
    SelectRule,
    SpaceConfig,
    TrackingConfig,
    TrainConfig,
    TrialsConfig,
    searchable_params,
)
from tuner.yamlio import LoadedYaml


class SweepConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    # tuner's loop reports val_accuracy, val_loss and train_loss; a user's code, its own names
    metric: str = Field("val_accuracy", pattern=r"^[A-Za-z_][\w./-]*$")
    mode: Literal["max", "min"] | None = None  # None: the metric's natural direction
    # Several objectives: written `metric: [val_accuracy, params]` with `mode: [max, min]`,
    # kept as metric/mode = the first and this list of every one (as sweep.yaml saves it).
    objectives: list[Objective] = Field(default_factory=list)
    select: Literal["knee"] | SelectRule = "knee"  # which point of the Pareto front is exported
    # What a trial must meet to count ("params < 200000"): told to the searchers that model
    # them, and the best is the best feasible trial (tuner/folder/constraints.py).
    constraints: list[str] = Field(default_factory=list)
    # A user's code (docs/own-code.md): a training function or a command runs each trial
    # instead of tuner's loop; model.factory names a model of the user's for either.
    trainable: str | None = None  # my_train:train, called as train(params, context)
    command: list[str] | None = Field(None, min_length=1)  # ["python", "train.py", "--lr", "{lr}"]
    # The lines of a command's output that are reports, as regexes with named groups (Katib's
    # metricsFormat): "Epoch (?P<epoch>\d+)/\d+ - loss: (?P<loss>\S+) - val_acc: (?P<val_acc>\S+)".
    # None: JSON objects and name=value pairs (tuner/trial/command.py).
    metric_pattern: str | list[str] | None = None
    # An Optuna objective, unchanged: my_study:objective, called as objective(trial); its
    # trial.suggest_* calls are the space (define-by-run), its return value the metric.
    objective: str | None = None
    code_dir: str | None = None  # the folder the user's modules are in; None: the sweep file's
    seed: int = 0
    output_dir: str = "runs"  # the sweep writes to <output_dir>/<name>/
    data: DataConfig = DataConfig()
    model: ModelConfig = CnnConfig()
    train: TrainConfig = TrainConfig()
    space: SpaceConfig = SpaceConfig()
    searcher: SearcherConfig = registry.DEFAULT_SEARCHER
    scheduler: SchedulerConfig = registry.DEFAULT_SCHEDULER
    trials: TrialsConfig = TrialsConfig()
    scaling: ScalingConfig = ScalingConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    tracking: TrackingConfig = TrackingConfig()
    # The file it was read from and the line of every key: for the errors found after
    # validation, when the data are planned (a data.path that is not a folder).
    _origin: LoadedYaml | None = PrivateAttr(default=None)
    # searcher: auto: what it picked and why, said when the sweep starts
    _picked: str | None = PrivateAttr(default=None)

    @field_validator("output_dir")
    @classmethod
    def _a_path(cls, value: str) -> str:
        # A storage URI (s3://bucket/runs, gs://..., file:///...): tuner/folder/remote.py.
        if remote.is_remote(value) and not remote.usable_uri(value):
            raise custom(
                "uri_output_dir",
                "not a storage URI tuner can use; give scheme://bucket/folder, e.g. s3://my-bucket/runs",
                value=value,
            )
        return value

    @field_validator("constraints", mode="before")
    @classmethod
    def _readable_constraints(cls, value: Any) -> Any:
        return checks.constraint_texts(value)

    @model_validator(mode="before")
    @classmethod
    def _a_choice_of_models(cls, data: Any) -> Any:
        """``model: {name: {choice: {cnn: {...}, resnet18: {...}}}}``: the model section becomes
        the first model, and the space a conditional choice ``model`` over them, each value with
        its own options (tuner/trial/runner.py builds the one a trial took)."""
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or not isinstance(model.get("name"), dict):
            return data
        choice = model["name"].get("choice") if len(model["name"]) == 1 else None
        if not isinstance(choice, dict) or not choice:
            raise fail(
                "model.name: a model's name, or a choice of models with their options "
                "({{choice: {{cnn: {{...}}, resnet18: {{...}}}}}}), but got {name!r}",
                name=model["name"],
            )
        others = sorted(set(model) - {"name"})
        if others:
            raise fail(
                "model.{key}: with a choice of models, give each model's options under its name in model.name.choice",
                key=others[0],
            )
        space = dict(data.get("space") or {})
        params = dict(space.get("params") or {})
        if MODEL_CHOICE in params:
            raise fail("space.params.model: the choice of models is model.name's; give it there only")
        params[MODEL_CHOICE] = {"choice": {name: options or {} for name, options in choice.items()}}
        return {**data, "model": {"name": next(iter(choice))}, "space": {**space, "params": params}}

    @model_validator(mode="before")
    @classmethod
    def _several_objectives(cls, data: Any) -> Any:
        """``metric: [a, b]`` / ``mode: [max, min]``: metric and mode become the first, and
        ``objectives`` every one."""
        if not isinstance(data, dict) or not isinstance(data.get("metric"), list):
            if isinstance(data, dict) and isinstance(data.get("mode"), list):
                raise fail(
                    "mode: a list of modes goes with a list of metrics, but metric is {m!r}", m=data.get("metric")
                )
            return data
        metrics, modes = data["metric"], data.get("mode")
        if not metrics or not all(isinstance(m, str) for m in metrics):
            raise fail("metric: a list of metric names, but got {metrics!r}", metrics=metrics)
        if len(set(metrics)) != len(metrics):
            raise fail("metric: each objective once, but got {metrics}", metrics=metrics)
        if modes is None:
            unknown = [m for m in metrics if m not in METRICS]
            if unknown:
                raise fail(
                    "mode: say whether each metric is best at max or min (mode: [max, min, ...]); "
                    "{m!r} is not one of tuner's",
                    m=unknown[0],
                )
            modes = [METRICS[m] for m in metrics]
        if not isinstance(modes, list) or len(modes) != len(metrics):
            raise fail(
                "mode: one mode per metric ({n} metrics: {metrics}), but got {modes!r}",
                n=len(metrics),
                metrics=metrics,
                modes=modes,
            )
        if len(metrics) == 1:
            return {**data, "metric": metrics[0], "mode": modes[0]}
        return {
            **data,
            "metric": metrics[0],
            "mode": modes[0],
            "objectives": [{"metric": m, "mode": mode} for m, mode in zip(metrics, modes, strict=True)],
        }

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        checks.own_code(self)
        if self.mode is None:
            object.__setattr__(self, "mode", METRICS[self.metric])
        checks.space(self)
        if self.objective is not None:
            registry.objective_default(self)
        if self.searcher.picks:
            registry.pick(self)
        checks.objectives(self)
        if self.objectives:
            registry.check_objectives(self)
        registry.check_pair(self, checks.conditional_at(self))
        if self.objective is not None:
            registry.check_objective(self)
        checks.the_rest(self)
        checks.constraints(self)
        return self

    @property
    def parsed_constraints(self) -> tuple[Any, ...]:
        """``constraints`` as tuner/folder/constraints.py's Constraint objects."""
        from tuner.folder import constraints

        return tuple(constraints.parse(text) for text in self.constraints)

    def nothing_feasible(self, histories: dict[str, list[dict[str, Any]]]) -> str | None:
        """Why there is no best although trials reported the metric: none meets the
        constraints (one line); None when there is a feasible trial, or no report at all."""
        reported = [rows for rows in histories.values() if any(self.metric in row for row in rows)]
        if not self.constraints or not reported or self.best_epoch(histories) is not None:
            return None
        return (
            f"no trial meets the constraints ({', '.join(self.constraints)}): "
            f"all {len(reported)} that reported {self.metric} are infeasible"
        )

    @property
    def objective_pairs(self) -> list[tuple[str, str]]:
        """(metric, mode) of every objective; [] for one metric."""
        return [(o.metric, o.mode) for o in self.objectives]

    def best_rule(self) -> Any:
        """``select`` as tuner/folder/pareto.py takes it."""
        from tuner.folder import pareto

        if not isinstance(self.select, SelectRule):
            return pareto.Rule()
        by = self.select.max or self.select.min
        where = pareto.parse_where(self.select.where) if self.select.where else ()
        return pareto.Rule(by=by, mode="max" if self.select.max else "min", where=where)

    def best_epoch(self, histories: dict[str, list[dict[str, Any]]]) -> Any:
        """The sweep's best (trial, epoch) over ``histories``: by its metric, or by ``select``
        on the Pareto front of several objectives, among the trials that meet ``constraints``
        (tuner.folder.records.best_epoch)."""
        from tuner.folder import records

        return records.best_epoch(
            histories, self.metric, self.mode, self.objective_pairs, self.best_rule(), self.parsed_constraints
        )

    @property
    def picked(self) -> str | None:
        """What ``searcher: auto`` picked and why; None when the file named the searcher."""
        return getattr(self, "_picked", None)

    @property
    def own_loop(self) -> bool:
        """A user's training function, command or objective runs each trial, not tuner's loop."""
        return self.trainable is not None or self.command is not None or self.objective is not None

    @property
    def uses_data(self) -> bool:
        """Whether trials get the data section's images: always in tuner's loop; a user's
        function or command only when the file has a data section."""
        return not self.own_loop or "data" in self.model_fields_set

    @property
    def has_model(self) -> bool:
        """Whether there is a model to export: tuner's loop, or a user's code with model.factory."""
        return not self.own_loop or isinstance(self.model, FactoryConfig)

    def searched_model_options(self) -> list[str]:
        """Searched names that go to a torchvision builder or a user's factory as options."""
        if not isinstance(self.model, OpenOptions):
            return []
        return [name for name in self.flat_specs() if name not in searchable_params(self.model)]

    def flat_specs(self) -> dict[str, spaces.ParamSpec]:
        """Every name a trial's config can hold, a conditional choice's parameters included."""
        return spaces.flat_specs(self.param_specs())

    def param_specs(self, *, registry_only: bool = False) -> dict[str, spaces.ParamSpec]:
        """The resolved search space: registry space, then inline params over it."""
        specs = spaces.load_registry_space(self.space.use) if self.space.use else {}
        if not registry_only:
            specs.update({k: spaces.parse_param(v) for k, v in self.space.params.items()})
        return specs

    @property
    def max_epochs(self) -> int:
        return self.train.epochs

    def locate(self, error: ConfigError) -> ConfigError:
        """``error``, about a field of this config (``data.path: ...``), naming the file and
        line the field was read from, as validation's errors do; as it was when that is unknown."""
        origin = getattr(self, "_origin", None)  # None: built in code, or unpickled from before
        if error.file is not None or origin is None:
            return error
        return ConfigError(error.reason, file=origin.file, line=origin.line_of_message(error.reason))

    @property
    def total_trials(self) -> int:
        """num_samples, times every combination of grid values."""
        total = self.trials.num_samples
        for spec in self.param_specs().values():
            if spec.kind == "grid":
                total *= len(spec.args)
        return total
