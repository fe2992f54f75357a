"""The study behind an Optuna objective run unchanged (``objective: my_study:objective``).

An Optuna objective's space is its own ``trial.suggest_*`` calls (define-by-run), made
inside each trial as it runs. The driver owns one Optuna study for the sweep, held by a
``StudyKeeper`` actor on the driver's node; each Tune trial asks it for an Optuna trial
and every ``suggest_*``, ``report``, ``should_prune`` and ``set_user_attr`` of the user's
code is answered there (tuner/trial/optuna_api.py), so the sweep's sampler (TPE, GP,
CMA-ES, ..., random) learns from every trial as in one process, on any node of a cluster.

The study is kept in the sweep folder (``study.journal``, Optuna's JournalStorage), so a
resumed sweep's sampler knows every trial before; a Tune trial retried or resumed is given
back the values it was first suggested (a new Optuna trial with the same parameters when
the first one ended).
"""

from __future__ import annotations

import hashlib
import math
import warnings
from pathlib import Path
from typing import Any

from tuner.folder import RETURNED  # noqa: F401 (its home: the history's record format)

STUDY_FILE = "study.journal"  # in the sweep folder
TRIAL_ID_ATTR = "tuner.trial_id"  # an Optuna trial's system attribute: the Tune trial it belongs to

# In a report of an objective's trial (tuner/trial/optuna_api.py): the values its
# trial.suggest_* calls were given since its last report, which the driver puts in the Tune
# trial's config (tuner.driver.callbacks.StudyTrials), and the mark of its returned value.
SUGGESTED = "suggested"

_kept: dict[str, Any] = {}  # the keepers this driver started, by name


class SpaceConflict(ValueError):
    """The objective suggested a name with another range than an earlier call in the sweep."""


class StudyKeeper:
    """One sweep's Optuna study (a Ray actor: ``start``)."""

    def __init__(self, journal: str, direction: str, sampler: Any, pruner: Any, study_name: str):
        import optuna
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # tuner says what happens, once
        storage = JournalStorage(JournalFileBackend(journal))
        self.study = optuna.create_study(
            storage=storage,
            sampler=sampler,
            pruner=pruner or optuna.pruners.NopPruner(),
            study_name=study_name,
            direction="maximize" if direction == "max" else "minimize",
            load_if_exists=True,  # a resumed sweep: its study as it was
        )
        if self.study.trials:  # a resumed (or extended) sweep: the sweep's seed would draw its first trials again
            self.study.sampler.reseed_rng()
        self.trials: dict[str, Any] = {}  # Tune trial id -> its live Optuna trial
        self.params: dict[str, dict[str, Any]] = {}  # Tune trial id -> the values it was given
        self.seen: dict[str, tuple[str, Any]] = {}  # parameter -> (the trial that first gave it, its distribution)
        for frozen in self.study.get_trials(deepcopy=False):
            for name, distribution in frozen.distributions.items():
                self.seen.setdefault(name, (str(frozen.system_attrs.get(TRIAL_ID_ATTR, frozen.number)), distribution))

    def ask(self, trial_id: str) -> tuple[int, dict[str, Any]]:
        """The Optuna trial of Tune's ``trial_id`` (its number and the values it has)."""
        import optuna
        from optuna.trial import TrialState

        if trial_id not in self.trials:
            earlier = [
                t for t in self.study.get_trials(deepcopy=False) if t.system_attrs.get(TRIAL_ID_ATTR) == trial_id
            ]
            running = [t for t in earlier if t.state == TrialState.RUNNING]
            if running:  # the driver that asked first was stopped: carry on with that trial
                trial = optuna.trial.Trial(self.study, running[-1]._trial_id)
            else:
                if earlier:  # a retry after it failed, or a resume: the values it had
                    self.study.enqueue_trial(earlier[-1].params, skip_if_exists=False)
                trial = self.study.ask()
                self.study._storage.set_trial_system_attr(trial._trial_id, TRIAL_ID_ATTR, trial_id)
            self.trials[trial_id] = trial
        trial = self.trials[trial_id]
        self.params[trial_id] = dict(trial.params)
        return trial.number, dict(trial.params)

    def suggest(self, trial_id: str, method: str, args: tuple, kwargs: dict) -> Any:
        trial = self.trials[trial_id]
        name = str(args[0] if args else kwargs.get("name"))
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            value = getattr(trial, method)(*args, **kwargs)
        distribution = trial.distributions[name]
        if any("Inconsistent parameter values" in str(w.message) for w in warned):  # Optuna keeps the first
            raise SpaceConflict(
                f"objective: trial {trial_id} suggests {name!r} twice with two ranges; it was {_shown(distribution)} "
                "first; give a parameter one range in a sweep"
            )
        self.params[trial_id] = dict(trial.params)
        first, before = self.seen.setdefault(name, (trial_id, distribution))
        if before != distribution:
            raise SpaceConflict(
                f"objective: trial {trial_id} suggests {name!r} as {_shown(distribution)}, but trial {first} "
                f"suggested it as {_shown(before)}; give a parameter one range in a sweep"
            )
        return value

    def report(self, trial_id: str, value: float, step: int) -> None:
        self.trials[trial_id].report(value, step)

    def should_prune(self, trial_id: str) -> bool:
        return self.trials[trial_id].should_prune()

    def set_user_attr(self, trial_id: str, key: str, value: Any) -> None:
        self.trials[trial_id].set_user_attr(key, value)

    def user_attrs(self, trial_id: str) -> dict[str, Any]:
        return dict(self.trials[trial_id].user_attrs)

    def tell(self, trial_id: str, value: float | None, state: str) -> None:
        """The trial ended: ``complete`` with its value, ``pruned`` or ``fail``."""
        from optuna.trial import TrialState

        trial = self.trials.pop(trial_id, None)
        if trial is None:
            return
        states = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "fail": TrialState.FAIL}
        self.study.tell(trial, value if state == "complete" else None, state=states[state])

    def close(self, trial_id: str, value: float | None = None) -> dict[str, Any]:
        """The Tune trial ended; if it had not told: complete with ``value`` (it reached a
        Ray Tune scheduler's max_t at a report), else pruned (a scheduler stopped it at a
        report) or failed (no report: its process died). Returns the values it was given
        (an error before its first report sent none to the driver)."""
        trial = self.trials.get(trial_id)
        if trial is not None:
            reported = bool(self.study._storage.get_trial(trial._trial_id).intermediate_values)
            if value is not None:
                self.tell(trial_id, float(value), "complete")
            else:
                self.tell(trial_id, None, "pruned" if reported else "fail")
        return self.params.get(trial_id, {})

    def ready(self) -> bool:
        return True


def _shown(distribution: Any) -> str:
    """``float in [0.001, 0.1] (log)``, ``int in [1, 8] step 1``, ``one of ['a', 'b']``."""
    if hasattr(distribution, "choices"):
        return f"one of {list(distribution.choices)}"
    kind = "int" if type(distribution).__name__.startswith("Int") else "float"
    text = f"{kind} in [{distribution.low}, {distribution.high}]"
    if getattr(distribution, "step", None) not in (None, 1) or (kind == "float" and distribution.step):
        text += f" step {distribution.step}"
    return text + (" (log)" if getattr(distribution, "log", False) else "")


def start(sweep: Any, folder: Any) -> str:
    """The sweep's study keeper, a named actor on this (the driver's) node, where the sweep
    folder (``folder``: a SweepFolder) is; returns the name its trials look it up by. It
    lives as long as the driver; a resumed sweep's gets the same name."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    name = keeper_name(folder)
    keeper = ray.remote(StudyKeeper).options(
        name=name,
        num_cpus=0,
        max_concurrency=1,  # one call at a time: the study is not shared across threads
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False),
    )
    handle = keeper.remote(
        str(Path(folder.root) / STUDY_FILE),
        sweep.mode,
        sweep.searcher.study_sampler(sweep),
        sweep.scheduler.study_pruner(sweep),
        sweep.name,
    )
    ray.get(handle.ready.remote())
    _kept[name] = handle  # a handle held for as long as the driver runs
    return name


def keeper_name(folder: Any) -> str:
    """The study keeper's actor name, the same for every driver of the sweep (the callbacks
    Tune saved with a sweep find a resumed sweep's keeper by it)."""
    return "tuner-study-" + hashlib.sha1(str(Path(folder.root).resolve()).encode()).hexdigest()[:12]


def number(value: Any) -> float | None:
    """An objective's returned value as a float; None: not a number (or NaN)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # a 0-d tensor or numpy scalar
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)
