"""An Optuna objective, unchanged: ``objective: my_study:objective`` where

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        if trial.suggest_categorical("model", ["mlp", "cnn"]) == "cnn":   # a conditional space
            channels = trial.suggest_int("channels", 8, 64)
        for step in range(20):
            accuracy = train_one_epoch(...)
            trial.report(accuracy, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return accuracy

runs each Tune trial's call of the function with a ``Trial`` that behaves as Optuna's:
its ``suggest_*`` calls are answered by the sweep's study (tuner/search/define_by_run.py,
an actor the driver owns), each value a parameter of the trial in every record; a
``report`` is an epoch (the history, the schedulers, MLflow, TensorBoard); the returned
value is the trial's last report, marked ``returned``. ``TrialPruned`` ends the trial as
stopped early; an error ends it errored with its last line (the sweep goes on).
"""

from __future__ import annotations

from typing import Any

from tuner.search.define_by_run import RETURNED
from tuner.trial.context import Context, TrialCodeError


class Trial:
    """Optuna's ``Trial`` for an objective run by tuner: the same calls, answered by the
    sweep's study (``number``, ``params``, ``suggest_*``, ``report``, ``should_prune``,
    ``set_user_attr``, ``user_attrs``)."""

    def __init__(self, keeper: Any, number: int, params: dict[str, Any], context: Context):
        self._keeper, self._number, self._context = keeper, number, context
        self._params = dict(params)
        self._id = context.trial_id
        context.suggested.update(self._params)

    @property
    def number(self) -> int:
        """The trial's number in the study (0, 1, ... in the order trials asked)."""
        return self._number

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def user_attrs(self) -> dict[str, Any]:
        return self._ask("user_attrs")

    def set_user_attr(self, key: str, value: Any) -> None:
        self._ask("set_user_attr", key, value)

    def report(self, value: float, step: int) -> None:
        """An intermediate value: an epoch of the trial's (it does not return when a Ray Tune
        scheduler stops the trial here)."""
        self._keeper.report.remote(self._id, float(value), int(step))  # in order with the next call
        self._context.report({self._context.metric: value, "step": step})

    def should_prune(self) -> bool:
        """The study's pruner's answer (``scheduler: pruner``); False under Ray Tune's schedulers,
        which stop a trial at its report instead."""
        return bool(self._ask("should_prune"))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("suggest_"):
            return lambda *args, **kwargs: self._suggest(name, args, kwargs)
        raise AttributeError(f"tuner runs this objective with a trial that has no {name!r} (Optuna's Trial has)")

    def _suggest(self, method: str, args: tuple, kwargs: dict) -> Any:
        value = self._ask("suggest", method, args, kwargs)
        self._params[str(args[0] if args else kwargs["name"])] = value
        self._context.suggested.update(self._params)
        return value

    def _ask(self, method: str, *args: Any) -> Any:
        import ray

        from tuner.search.define_by_run import SpaceConflict

        try:
            return ray.get(getattr(self._keeper, method).remote(self._id, *args))
        except ray.exceptions.RayTaskError as error:
            cause = error.as_instanceof_cause()
            if isinstance(cause, SpaceConflict):
                raise TrialCodeError(str(cause.args[0] if cause.args else cause)) from None
            if isinstance(cause, (TypeError, ValueError)):  # Optuna's word on a bad call (low > high, ...)
                raise type(cause)(*cause.args) from None
            raise


def run_objective(own: Any, context: Context) -> None:
    """Call the objective with its trial; tell the study how it ended."""
    import optuna
    import ray

    from tuner.search.define_by_run import number
    from tuner.usercode import names

    keeper = ray.get_actor(own.study)
    trial_number, params = ray.get(keeper.ask.remote(context.trial_id))
    objective = own.function or names.load(own.objective, None, field="objective")  # the snapshot is first on the path
    trial = Trial(keeper, trial_number, params, context)
    try:
        returned = objective(trial)
    except optuna.TrialPruned:
        ray.get(keeper.tell.remote(context.trial_id, None, "pruned"))
        return
    except BaseException:
        ray.get(keeper.tell.remote(context.trial_id, None, "fail"))
        raise
    value = number(returned)
    if value is None:
        ray.get(keeper.tell.remote(context.trial_id, None, "fail"))
        raise TrialCodeError(f"{own.source} returned {returned!r}: an objective returns a number (its {own.metric!r})")
    ray.get(
        keeper.tell.remote(context.trial_id, value, "complete")
    )  # before the report, which a stop may not return from
    context.report({own.metric: value, RETURNED: 1})
