"""A sweep's search space as an Optuna define-by-run function, and Ray's OptunaSearch
taking it (tuner/search/registry.py builds it with the sampler the file names).

Define-by-run is how Optuna takes a conditional space: a trial suggests the value of a
conditional choice, then only that branch's parameters. Inside Optuna each parameter is
named by its path (``lr``, or ``optimizer.sgd.lr`` under a branch), so two branches may
give one name different ranges; the trial gets plain names (``tuner.search.spaces.flatten``).

``encode`` goes the other way, for a warm start: a finished trial's plain config becomes
Optuna's parameters and distributions, or None when it lies outside this space.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ray.tune.search.optuna import OptunaSearch

from tuner.folder import constraints as constraining
from tuner.folder.constraints import Constraint
from tuner.search.spaces import ParamSpec

PLAIN = (type(None), bool, int, float, str)  # what Optuna's categorical distribution holds


class OptunaSpace:
    """Called with an Optuna trial, returns the trial's config (plain names, constants in)."""

    def __init__(self, specs: dict[str, ParamSpec]):
        self.specs = specs

    def __call__(self, trial: Any) -> dict[str, Any]:
        return self._sample(trial, self.specs, "")

    def _sample(self, trial: Any, specs: dict[str, ParamSpec], prefix: str) -> dict[str, Any]:
        config: dict[str, Any] = {}
        for name, spec in specs.items():
            if spec.kind == "constant":
                config[name] = spec.args[0]
                continue
            key = prefix + name
            value = _from_internal(spec, trial._suggest(key, distribution(spec)))
            config[name] = value
            if spec.kind == "branches":
                config.update(self._sample(trial, spec.branches[value], f"{key}.{value}."))
        return config

    def encode(self, config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Optuna's params and distributions of a plain config; None if it is outside the space."""
        params: dict[str, Any] = {}
        distributions: dict[str, Any] = {}
        if not self._encode(config, self.specs, "", params, distributions):
            return None
        return params, distributions

    def _encode(
        self, config: dict[str, Any], specs: dict[str, ParamSpec], prefix: str, params: dict, distributions: dict
    ) -> bool:
        for name, spec in specs.items():
            if spec.kind == "constant":
                continue
            if name not in config:
                return False
            key, value = prefix + name, config[name]
            internal = _to_internal(spec, value)
            if internal is None:
                return False
            dist = distribution(spec)
            params[key], distributions[key] = dist.to_external_repr(internal), dist
            if spec.kind == "branches" and not self._encode(
                config, spec.branches[value], f"{key}.{value}.", params, distributions
            ):
                return False
        return True


def _indexed(spec: ParamSpec) -> bool:
    """A choice Optuna cannot hold as itself (lists, mappings): suggested by its index."""
    return spec.kind == "choice" and not all(isinstance(v, PLAIN) for v in spec.args)


def distribution(spec: ParamSpec) -> Any:
    from optuna import distributions as d

    low, high = (spec.args + (None, None))[:2]
    if spec.kind == "uniform":
        return d.FloatDistribution(low, high)
    if spec.kind == "loguniform":
        return d.FloatDistribution(low, high, log=True)
    if spec.kind == "quniform":
        return d.FloatDistribution(low, high, step=spec.args[2])
    if spec.kind == "qloguniform":  # Optuna has no log scale with a step: rounded to q after
        return d.FloatDistribution(low, high, log=True)
    if spec.kind == "randint":
        return d.IntDistribution(low, high - 1)
    if spec.kind == "branches":
        return d.CategoricalDistribution(list(spec.branches))
    if spec.kind == "choice":
        return d.CategoricalDistribution(list(range(len(spec.args))) if _indexed(spec) else list(spec.args))
    raise ValueError(f"Optuna takes no {spec.kind} parameter")  # grid: refused at load


def _from_internal(spec: ParamSpec, value: Any) -> Any:
    if spec.kind == "qloguniform":
        q = spec.args[2]
        return min(max(round(value / q) * q, spec.args[0]), spec.args[1])
    if _indexed(spec):
        return spec.args[value]
    return value


def _to_internal(spec: ParamSpec, value: Any) -> Any:
    """The value as Optuna's distribution holds it (internal repr), or None if outside."""
    dist = distribution(spec)
    if spec.kind in ("choice", "branches"):
        values = list(spec.branches) if spec.kind == "branches" else list(spec.args)
        if value not in values:
            return None
        return values.index(value)  # Optuna's categorical internal repr is the index
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    low, high = spec.args[0], (spec.args[1] - 1 if spec.kind == "randint" else spec.args[1])
    if not low <= value <= high:
        return None
    return dist.to_internal_repr(value)


class SpaceOptunaSearch(OptunaSearch):
    """Ray's OptunaSearch with a tuner space: the trial's config is what the space returns
    (plain names), not Optuna's path-named parameters; with ``constraints`` (tuner/folder/
    constraints.py), each trial's constraint values set on its Optuna trial before
    ``study.tell``, from the last value it reported of each constrained metric (Optuna 5's
    ``Trial.set_constraint``, which TPE, GP and NSGA-II read; ``constraints_func`` is
    deprecated there)."""

    def __init__(self, *args: Any, constraints: Sequence[Constraint] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._constraints = tuple(constraints)
        self._constrained_values: dict[str, dict[str, float]] = {}  # trial id -> metric -> last value

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self._note_constrained(trial_id, result)
        super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        constraints = getattr(self, "_constraints", ())  # () in a searcher pickled before constraints
        if constraints and result and trial_id not in self._completed_trials:
            self._note_constrained(trial_id, result)
            ot_trial = self._ot_trials[trial_id]
            measured = self._constrained_values.pop(trial_id, {})
            for key, value in constraining.optuna_values(constraints, measured).items():
                ot_trial.set_constraint(key, value)
        super().on_trial_complete(trial_id, result, error)

    def _note_constrained(self, trial_id: str, result: dict) -> None:
        constraints = getattr(self, "_constraints", ())
        if constraints:
            found = constraining.last_values([result], (c.metric for c in constraints))
            self._constrained_values.setdefault(trial_id, {}).update(found)

    def _suggest_from_define_by_run_func(self, func: Any, ot_trial: Any) -> dict[str, Any]:
        return func(ot_trial)
