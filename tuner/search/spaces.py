"""Search spaces: the YAML forms, the registry in ``search_spaces/``, and Tune domains.

A parameter is written as a constant (``momentum: 0.9``) or as a one-key mapping
naming its distribution::

    lr:         {loguniform: [1.0e-4, 1.0e-2]}
    dropout:    {uniform: [0.0, 0.5]}
    hidden:     {quniform: [64, 256, 32]}      # also qloguniform: [low, high, q]
    conv2:      {randint: [16, 65]}             # high is exclusive, as in Tune
    optimizer:  {choice: [adam, sgd]}
    batch_size: {grid: [64, 128]}               # every value, num_samples times each

A conditional choice maps each value to the parameters that exist only under it::

    optimizer:
      choice:
        sgd:  {momentum: {uniform: [0.8, 0.99]}, lr: {loguniform: [1.0e-3, 1.0e-1]}}
        adam: {lr: {loguniform: [1.0e-4, 1.0e-2]}}

A trial gets the value taken and that branch's parameters only, as plain names
(``optimizer: sgd, momentum: 0.93, lr: 0.02``): ``flatten`` turns the nested form the
searchers sample (``{optimizer: {sgd: {...}}}``) into that.

Ray is imported only when a space is converted, so validation stays light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tuner.errors import ConfigError
from tuner.usercode.shipped import registry_dir
from tuner.yamlio import load_yaml

SPACES_DIR = registry_dir()

RANGE_KINDS = ("uniform", "loguniform", "quniform", "qloguniform", "randint")
LIST_KINDS = ("choice", "grid")
KINDS = (*RANGE_KINDS, *LIST_KINDS)


@dataclass(frozen=True)
class ParamSpec:
    """One hyperparameter's distribution: ``kind`` plus its arguments."""

    kind: str  # one of KINDS, "constant", or "branches" (a conditional choice)
    args: tuple[Any, ...]  # branches: ((value, {name: ParamSpec}), ...)

    @property
    def branches(self) -> dict[Any, dict[str, ParamSpec]]:
        """A conditional choice's values, each with the parameters that exist under it."""
        return dict(self.args) if self.kind == "branches" else {}

    @property
    def is_quantized(self) -> bool:
        return self.kind in ("quniform", "qloguniform")

    def representative_values(self) -> list[Any]:
        """Values a sampled config can take at the edges, to type-check them early."""
        if self.kind == "constant":
            return [self.args[0]]
        if self.kind in LIST_KINDS:
            return list(self.args)
        if self.kind == "branches":
            return list(self.branches)
        if self.kind == "randint":
            return [self.args[0], self.args[1] - 1]
        return [self.args[0], self.args[1]]

    def to_tune(self) -> Any:
        """The Ray Tune domain (or plain constant) for this parameter."""
        from ray import tune

        low, high = (self.args + (None, None))[:2]
        builders = {
            "constant": lambda: self.args[0],
            "uniform": lambda: tune.uniform(low, high),
            "loguniform": lambda: tune.loguniform(low, high),
            "quniform": lambda: tune.quniform(low, high, self.args[2]),
            "qloguniform": lambda: tune.qloguniform(low, high, self.args[2]),
            "randint": lambda: tune.randint(low, high),
            "choice": lambda: tune.choice(list(self.args)),
            "grid": lambda: tune.grid_search(list(self.args)),
            # one key per branch keeps its parameters' names apart ("optimizer/sgd/lr" in HyperOpt)
            "branches": lambda: tune.choice(
                [{value: to_param_space(params)} for value, params in self.branches.items()]
            ),
        }
        return builders[self.kind]()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_param(value: Any) -> ParamSpec:
    """Parse one parameter's YAML value; ValueError says what is wrong."""
    if not isinstance(value, dict):
        return ParamSpec("constant", (value,))
    if len(value) != 1:
        raise ValueError(
            f"a distribution is a mapping with one key (one of: {', '.join(KINDS)}), "
            f"but got keys {sorted(map(str, value))}"
        )
    kind, args = next(iter(value.items()))
    if kind not in KINDS:
        raise ValueError(f"unknown distribution {kind!r}; choose one of: {', '.join(KINDS)}")
    if kind == "choice" and isinstance(args, dict) and args:
        return _parse_branches(args)
    if not isinstance(args, list) or not args:
        also = " or a mapping from each value to its own parameters" if kind == "choice" else ""
        raise ValueError(f"{kind} takes a non-empty list{also}, but got {args!r}")
    if kind in LIST_KINDS:
        return ParamSpec(kind, tuple(args))
    return ParamSpec(kind, tuple(_check_range(kind, args)))


def _parse_branches(branches: dict[Any, Any]) -> ParamSpec:
    """``{choice: {value: {param: distribution, ...}, ...}}``; a branch without parameters is
    ``{}`` or empty (``adam:``)."""
    parsed = []
    for value, params in branches.items():
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ValueError(
                f"choice branch {value!r} maps to its parameters ({{name: distribution}}), but got {params!r}"
            )
        specs = {}
        for name, param in params.items():
            try:
                specs[str(name)] = parse_param(param)
            except ValueError as error:
                raise ValueError(f"branch {value}: {name}: {error}") from None
            if specs[str(name)].kind == "grid":
                raise ValueError(f"branch {value}: {name}: grid values cannot be inside a conditional choice")
        parsed.append((value, specs))
    return ParamSpec("branches", tuple(parsed))


def parse_params(origin: str, params: dict[str, Any]) -> dict[str, ParamSpec]:
    """Every parameter of a section (``origin``: where it is, e.g. ``space.params``), or the
    sweep-file error naming the first that does not parse."""
    from tuner.strict import fail

    specs = {}
    for name, value in params.items():
        try:
            specs[name] = parse_param(value)
        except ValueError as error:
            raise fail("{where}.{name}: {error}", where=origin, name=name, error=error) from None
    return specs


def flat_specs(specs: dict[str, ParamSpec]) -> dict[str, ParamSpec]:
    """Every name a trial can get: a conditional choice as a choice of its values, then the
    parameters under each value (the first branch's distribution where two share a name)."""
    flat: dict[str, ParamSpec] = {}
    for name, spec in specs.items():
        if spec.kind != "branches":
            flat.setdefault(name, spec)
            continue
        flat[name] = ParamSpec("choice", tuple(spec.branches))
        for params in spec.branches.values():
            for inner, inner_spec in flat_specs(params).items():
                flat.setdefault(inner, inner_spec)
    return flat


def is_conditional(specs: dict[str, ParamSpec]) -> bool:
    return any(spec.kind == "branches" for spec in specs.values())


def flatten(config: dict[str, Any], specs: dict[str, ParamSpec]) -> dict[str, Any]:
    """A sampled config with each conditional choice's ``{value: {params}}`` made plain names."""
    flat: dict[str, Any] = {}
    for name, value in config.items():
        spec = specs.get(name)
        if spec is not None and spec.kind == "branches" and isinstance(value, dict) and len(value) == 1:
            ((taken, params),) = value.items()
            flat[name] = taken
            flat.update(flatten(params, spec.branches.get(taken, {})))
        else:
            flat[name] = value
    return flat


def _check_range(kind: str, args: list[Any]) -> list[Any]:
    quantized = kind in ("quniform", "qloguniform")
    expected = 3 if quantized else 2
    form = "[low, high, q]" if quantized else "[low, high]"
    if len(args) != expected or not all(_is_number(a) for a in args):
        raise ValueError(f"{kind} takes {form} as numbers, but got {args!r}")
    low, high = args[0], args[1]
    if kind == "randint" and not all(isinstance(a, int) for a in args):
        raise ValueError(f"randint takes integers [low, high), but got {args!r}")
    if not low < high:
        raise ValueError(f"{kind}: low must be < high, but got low={low}, high={high}")
    if kind in ("loguniform", "qloguniform") and low <= 0:
        raise ValueError(f"{kind}: low must be > 0, but got low={low}")
    if quantized and not args[2] > 0:
        raise ValueError(f"{kind}: q must be > 0, but got q={args[2]}")
    if not all(math.isfinite(a) for a in args):
        raise ValueError(f"{kind}: bounds must be finite, but got {args!r}")
    if quantized and not all(math.isclose(b / args[2], round(b / args[2])) for b in (low, high)):
        raise ValueError(f"{kind}: low and high must be multiples of q, but got {args!r}")
    return args


def registry_names() -> list[str]:
    """Names of the spaces in ``search_spaces/`` (file stems)."""
    return sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))


def load_registry_space(name: str) -> dict[str, ParamSpec]:
    """Load ``search_spaces/<name>.yaml``: ``description`` plus ``params``."""
    path = SPACES_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(
            f"no search space named {name!r} in {SPACES_DIR}; choose one of: {', '.join(registry_names()) or '(none)'}"
        )
    loaded = load_yaml(path, display_name=f"search_spaces/{name}.yaml")
    data = loaded.data
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        raise ConfigError("a search space file needs a 'params' mapping", file=loaded.file, line=1)
    unknown = set(data) - {"description", "params"}
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(
            f"unknown key {key!r}; valid keys: description, params",
            file=loaded.file,
            line=loaded.line_of((key,)),
        )
    specs = {}
    for param, value in data["params"].items():
        try:
            specs[param] = parse_param(value)
        except ValueError as error:
            raise ConfigError(
                f"params.{param}: {error}", file=loaded.file, line=loaded.line_of(("params", param))
            ) from None
    return specs


def to_param_space(specs: dict[str, ParamSpec]) -> dict[str, Any]:
    """Tune ``param_space`` for a resolved set of parameter specs."""
    return {name: spec.to_tune() for name, spec in specs.items()}
