"""The sweep file's checks across fields, run when a SweepConfig is validated: the space
against the model's hyperparameters, several objectives, a user's code against tuner's
loop, and the rest of the sweep (the search methods check themselves: tuner/search/).
Each failure is one ``field.path: ...`` line, placed at its line by the loader."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from pydantic import BaseModel, TypeAdapter, ValidationError

from tuner.data.config import DataConfig
from tuner.search import spaces
from tuner.strict import fail
from tuner.sweepfile.sections import (
    CHOOSABLE_MODELS,
    METRICS,
    MODEL_CHOICE,
    SINGLE_ONLY,
    FactoryConfig,
    ModelConfig,
    OpenOptions,
    SelectRule,
    TrainConfig,
    searchable_params,
)

if TYPE_CHECKING:
    from tuner.sweepfile.schema import SweepConfig


def space(cfg: SweepConfig) -> None:
    """Every searched name is a hyperparameter, and every value it can take is valid."""
    specs = {**cfg.param_specs(registry_only=True), **spaces.parse_params("space.params", cfg.space.params)}
    mutations = spaces.parse_params("scheduler.mutations", cfg.scheduler.searched_elsewhere())
    _check_branch_names("space.params", specs, set(specs))
    if cfg.own_loop:  # the user's function or command takes whatever it is given
        return
    models = specs.get(MODEL_CHOICE)
    if models is not None:
        specs = {k: v for k, v in specs.items() if k != MODEL_CHOICE}
        _check_model_choice(cfg, models)
    allowed = searchable_params(cfg.model)
    for origin, params in (("space.params", specs), ("scheduler.mutations", mutations)):
        for where, name, spec in _walk(origin, params):
            if name not in allowed and isinstance(cfg.model, OpenOptions):
                continue  # an option of the model's builder: its signature is checked at load
            if name not in allowed:
                close = difflib.get_close_matches(name, sorted(allowed), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise fail(
                    "{where}.{name}: not a hyperparameter of model {model!r}{hint} (searchable: {valid})",
                    where=where,
                    name=name,
                    model=cfg.model.name,
                    hint=hint,
                    valid=", ".join(sorted(allowed)),
                )
            section = allowed[name]
            if section.model_fields[name].annotation is int and not _integral(spec):
                raise fail(
                    "{where}.{name}: {name} is an integer; use randint, choice, grid or a quantized "
                    "distribution with integer bounds and q, but got {dist} {args}",
                    where=where,
                    name=name,
                    dist=spec.kind,
                    args=list(spec.args),
                )
            _check_values(where, name, spec, section, cfg.model.name)


def _check_values(where: str, name: str, spec: spaces.ParamSpec, section: type[BaseModel], model: str) -> None:
    """Every value ``name`` can take is valid for the section that defines it."""
    for value in spec.representative_values():
        data = {name: value} if section in (TrainConfig, DataConfig) else {"name": model, name: value}
        try:
            section.model_validate(data)
        except ValidationError as error:
            raise fail(
                "{where}.{name}: value {value!r} is invalid ({reason})",
                where=where,
                name=name,
                value=value,
                reason=lower_first(error.errors()[0]["msg"]),
            ) from None


def _check_model_choice(cfg: SweepConfig, models: spaces.ParamSpec) -> None:
    """Each model of ``model.name``'s choice is one of tuner's, and its options are its own."""
    if models.kind != "branches":
        raise fail("model.name: a choice of models maps each model to its options ({{choice: {{cnn: {{}}, ...}}}})")
    for name, options in models.branches.items():
        if not isinstance(name, str) or not (name in CHOOSABLE_MODELS or name.startswith("torchvision:")):
            raise fail(
                "model.name.choice.{name}: a choice of models takes {valid} or torchvision:<builder>",
                name=name,
                valid=", ".join(CHOOSABLE_MODELS),
            )
        try:
            model = TypeAdapter(ModelConfig).validate_python({"name": name})
        except ValidationError as error:
            raise fail("model.name.choice.{name}: {reason}", name=name, reason=error.errors()[0]["msg"]) from None
        allowed = searchable_params(model)
        for where, option, spec in _walk(f"model.name.choice.{name}", options):
            if option not in allowed and not isinstance(model, OpenOptions):
                raise fail(
                    "{where}.{option}: not an option of model {name!r} (its options: {valid})",
                    where=where,
                    option=option,
                    name=name,
                    valid=", ".join(sorted(n for n, s in allowed.items() if s is type(model))),
                )
            if option in allowed:
                _check_values(where, option, spec, allowed[option], name)


def _walk(origin: str, specs: dict[str, spaces.ParamSpec]) -> list[tuple[str, str, spaces.ParamSpec]]:
    """(where, name, spec) of every parameter, those under a conditional choice's values too
    (where: ``space.params.optimizer.sgd``)."""
    found = []
    for name, spec in specs.items():
        found.append((origin, name, spec))
        for value, params in spec.branches.items():
            found.extend(_walk(f"{origin}.{name}.{value}", params))
    return found


def _check_branch_names(origin: str, specs: dict[str, spaces.ParamSpec], outer: set[str]) -> None:
    """A parameter under a choice's value is named nowhere above it: a trial gets plain names."""
    for name, spec in specs.items():
        choice = "model.name.choice" if (origin, name) == ("space.params", MODEL_CHOICE) else f"{origin}.{name}"
        for value, params in spec.branches.items():
            for inner in params:
                if inner in outer or inner == name:
                    raise fail(
                        "{choice}.{value}.{inner}: {inner!r} is already a parameter outside this branch; "
                        "a trial gets plain names, so give it in every branch or outside the choice only",
                        choice=choice,
                        value=value,
                        inner=inner,
                    )
            _check_branch_names(f"{origin}.{name}.{value}", params, outer | set(params) | {name})


def objectives(cfg: SweepConfig) -> None:
    """Several objectives: metrics trials report, a searcher that compares them, FIFO, a rule."""
    names = [o.metric for o in cfg.objectives]
    if cfg.objectives and (names[0], cfg.objectives[0].mode) != (cfg.metric, cfg.mode):
        raise fail(
            "objectives: the first objective is the metric ({metric}), but got {first}",
            metric=cfg.metric,
            first=names[0],
        )
    if not cfg.objectives:
        if cfg.metric in SINGLE_ONLY:
            raise fail(
                "metric: {metric!r} alone would find the smallest model, however bad; give it beside another, "
                "e.g. metric: [val_accuracy, {metric}]",
                metric=cfg.metric,
            )
        if isinstance(cfg.select, SelectRule):
            raise fail(
                "select: picks one point of a Pareto front, for several objectives (metric: [a, b]); "
                "with one metric the best is its best"
            )
        return
    if not cfg.own_loop:
        for objective in cfg.objectives:
            if objective.metric not in METRICS:
                raise fail(
                    "metric: tuner's loop reports {known}, but got {metric!r}",
                    known=", ".join(METRICS),
                    metric=objective.metric,
                )
            if objective.mode != METRICS[objective.metric]:
                raise fail(
                    "mode: {metric} is best at {natural}, but got {mode!r}",
                    metric=objective.metric,
                    natural=METRICS[objective.metric],
                    mode=objective.mode,
                )
    if isinstance(cfg.select, SelectRule):
        chosen = [k for k in ("max", "min") if getattr(cfg.select, k) is not None]
        if len(chosen) != 1:
            raise fail("select: give max: METRIC or min: METRIC (one of them), optionally with where, or select: knee")
        by = getattr(cfg.select, chosen[0])
        from tuner.folder import pareto

        try:
            conditions = pareto.parse_where(cfg.select.where) if cfg.select.where else ()
        except ValueError as error:
            raise fail("select.where: {error}", error=error) from None
        for name in [by, *(c.metric for c in conditions)]:
            if name not in names:
                raise fail(
                    "select: {name!r} is not an objective; choose from {names}", name=name, names=", ".join(names)
                )


def _objective(cfg: SweepConfig) -> None:
    """An Optuna objective: its own space, its returned value the metric (``value`` unless named)."""
    from tuner.usercode.names import check_reference

    given = [f"{name} {getattr(cfg, name)!r}" for name in ("trainable", "command") if getattr(cfg, name) is not None]
    if given:
        raise fail(
            "objective: a trial runs an objective, a training function or a command, but the file gives the "
            "objective {objective!r} and {given}",
            objective=cfg.objective,
            given=" and ".join(given),
        )
    try:
        check_reference(cfg.objective)
    except ValueError as error:
        raise fail("objective: {error}", error=error) from None
    if cfg.space.params:
        raise fail(
            "space.params: an objective's space is its own trial.suggest_* calls, but the file also searches "
            "{names}; remove space.params (give a constant to your code as Optuna would: in the objective)",
            names=", ".join(sorted(cfg.space.params)),
        )
    if "data" in cfg.model_fields_set:
        raise fail("data: an objective is called with its trial alone and reads its own data; remove the data section")
    if "metric" not in cfg.model_fields_set:
        object.__setattr__(cfg, "metric", "value")  # what Optuna calls an objective's returned number


def own_code(cfg: SweepConfig) -> None:
    """A user's function or command, or tuner's loop, and a metric the trials report."""
    if cfg.trainable is not None and cfg.command is not None:
        raise fail(
            "trainable / command: a trial runs either a training function or a command, but both are given "
            "(trainable {trainable!r}, command {command})",
            trainable=cfg.trainable,
            command=cfg.command,
        )
    if cfg.trainable is not None:
        from tuner.usercode.names import check_reference

        try:
            check_reference(cfg.trainable)
        except ValueError as error:
            raise fail("trainable: {error}", error=error) from None
    if cfg.objective is not None:
        _objective(cfg)
    if cfg.own_loop and "model" in cfg.model_fields_set and not isinstance(cfg.model, FactoryConfig):
        raise fail(
            "model.name: model {name!r} is trained by tuner's own loop, but the file gives {which} to train instead; "
            "with {which}, give model.factory (to export the best model) or no model section",
            name=cfg.model.name,
            which=_which(cfg),
        )
    if cfg.own_loop:
        loop_only = sorted(set(cfg.train.model_fields_set) - {"epochs"})
        if loop_only:
            raise fail(
                "train.{key}: a setting of tuner's own loop, which {which} replaces; give your code its values "
                "in space.params (a constant is a plain value there) and keep train.epochs only",
                key=loop_only[0],
                which=_which(cfg),
            )
    if cfg.metric not in METRICS:
        if not cfg.own_loop:
            raise fail(
                "metric: tuner's loop reports {known}, but got {metric!r} (a training function or command of "
                "your own may report any metric)",
                known=", ".join(METRICS),
                metric=cfg.metric,
            )
        if cfg.mode is None:
            raise fail(
                "metric: {metric!r} is your code's own; say whether it is best at max or min (mode: max or mode: min)",
                metric=cfg.metric,
            )


def _integral(spec: spaces.ParamSpec) -> bool:
    """Whether every value the distribution samples is a whole number."""
    if spec.kind in ("uniform", "loguniform"):
        return False
    if spec.is_quantized:
        return all(float(a).is_integer() for a in spec.args)
    return True


def conditional_at(cfg: SweepConfig) -> str | None:
    """Where the space's first conditional choice is written (``space.params.optimizer``, or
    ``model.name`` for a choice of models); None for a space without one."""
    for name, spec in cfg.param_specs().items():
        if spec.kind == "branches":
            return "model.name" if name == MODEL_CHOICE else f"space.params.{name}"
    return None


def the_rest(cfg: SweepConfig) -> None:
    """Scaling against the runner, and a metric of tuner's loop against its natural mode."""
    if cfg.scaling.runner == "direct" and cfg.scaling.workers > 1:
        raise fail(
            "scaling.runner: 'direct' runs one worker inside the trial, but scaling.workers is {workers}; "
            "use auto or torch_trainer",
            workers=cfg.scaling.workers,
        )
    if cfg.metric in METRICS and cfg.mode != METRICS[cfg.metric]:
        raise fail(
            "mode: {metric} is best at {natural}, but got mode={mode!r}",
            metric=cfg.metric,
            natural=METRICS[cfg.metric],
            mode=cfg.mode,
        )


def lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _which(cfg: SweepConfig) -> str:
    """How an error names the user's code the file gives."""
    return "trainable" if cfg.trainable is not None else "command" if cfg.command is not None else "objective"


def constraint_texts(value: object) -> object:
    """``constraints``: a list of ``<metric> <op> <number>``, each readable, none twice
    (tuner/folder/constraints.py reads them); each bad item is one ``constraints[i]:`` line."""
    from tuner.folder import constraints as constraining

    if value is None:
        return []
    if not isinstance(value, list):
        raise fail("constraints: a list such as ['params < 200000', 'latency_ms <= 2'], but got {value!r}", value=value)
    seen: dict[constraining.Constraint, int] = {}
    for index, text in enumerate(value):
        try:
            parsed = constraining.parse(text)
        except ValueError as error:
            raise fail(
                "constraints[{index}]: {error}, but got {given!r}", index=index, error=error, given=text
            ) from None
        if parsed in seen:
            raise fail(
                "constraints[{index}]: {given!r} repeats constraints[{first}]; give each constraint once",
                index=index,
                given=text,
                first=seen[parsed],
            )
        seen[parsed] = index
    return [text.strip() for text in value]


def constraints(cfg: SweepConfig) -> None:
    """Constraints on metrics the trials report: tuner's loop's, or any of a user's code; an
    Optuna objective reports only what it returns, so it has nothing to constrain."""
    if not cfg.constraints:
        return
    if cfg.objective is not None:
        raise fail(
            "constraints: an objective reports only the value it returns, so there is no metric to constrain; "
            "run your code as a trainable (module:function) that reports the constrained metrics"
        )
    if cfg.own_loop:
        return
    from tuner.folder.records import TRIAL_METRICS

    known = list(dict.fromkeys([*METRICS, *TRIAL_METRICS]))
    for index, constraint in enumerate(cfg.parsed_constraints):
        if constraint.metric not in known:
            close = difflib.get_close_matches(constraint.metric, known, n=1)
            raise fail(
                "constraints[{index}]: tuner's loop reports no {metric!r}{hint} (it reports {known})",
                index=index,
                metric=constraint.metric,
                hint=f"; did you mean {close[0]!r}?" if close else "",
                known=", ".join(known),
            )
