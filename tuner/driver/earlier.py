"""Sweeps that an earlier tuner started: ``tuner resume`` goes on with them.

Tune keeps a sweep's settings in ``tune/tuner.pkl``, and a model-based searcher its state in
``tune/searcher-state-*.pkl``: pickles that name the modules of the tuner that made them.
Two layouts came before today's: tuner 0.1's flat modules (``tuner.store``, ``tuner.config``,
...) and the ``tuner.spec`` package (``tuner.spec.config``, ``tuner.spec.hyperband``, ...,
until the search methods moved to ``tuner.search`` and the sweep file's schema to
``tuner.sweepfile``). Read with those names mapped to today's, a pickle gets today's
callbacks in place of the old ones and is written back; the original stays beside it
(``tuner.pkl.tuner-0.1``, ``tuner.pkl.tuner-spec``). Nothing else in the folder names a module.
"""

from __future__ import annotations

import importlib
import io
import pickle
import types
from typing import Any

from tuner.errors import TunerError
from tuner.folder import remote
from tuner.folder.store import SweepFolder

# Modules that moved whole: the same classes under a new name (the YAML origin, the
# spaces, tuner's HyperBand and BOHB schedulers, the Optuna and HyperOpt searchers).
MOVED = {
    "tuner.spaces": "tuner.search.spaces",
    "tuner.hyperband": "tuner.search.tune_hyperband",
    "tuner.spec.yamlio": "tuner.yamlio",
    "tuner.spec.shipped": "tuner.usercode.shipped",
    "tuner.spec.spaces": "tuner.search.spaces",
    "tuner.spec.hyperband": "tuner.search.tune_hyperband",
    "tuner.spec.optuna_space": "tuner.search.tune_optuna",
    "tuner.spec.hyperopt_space": "tuner.search.tune_hyperopt",
    "tuner.spec.auto": "tuner.search.auto",
    "tuner.spec.own_code": "tuner.sweepfile.own_code",
}
# Modules whose classes went to several homes: each name is looked up in these, in order.
SPLIT = ("tuner.config", "tuner.searchers", "tuner.schedulers", "tuner.spec.config", "tuner.spec.searchers",
         "tuner.spec.schedulers")  # fmt: skip
HOMES = (
    "tuner.sweepfile.schema",
    "tuner.sweepfile.sections",
    "tuner.data.config",
    "tuner.search.registry",  # every scheduler's and searcher's section, by its class name
    "tuner.search.base",
    "tuner.search.optuna_searcher",
)
RENAMED = {("tuner.store", "SweepPaths"): ("tuner.folder.store", "SweepFolder")}
# What only tuner 0.1's callbacks used: read as stand-ins, then dropped with them.
REPLACED = ("tuner.store", "tuner.progress", "tuner.tracking")
KEPT_SUFFIX = {"0.1": ".tuner-0.1", "spec": ".tuner-spec"}
SEARCHER_STATE = "searcher-state-"


def made_by_earlier_tuner(error: BaseException) -> bool:
    """Whether restoring failed on a module name an earlier tuner had and this tuner has not."""
    name = getattr(error, "name", None) or ""
    return isinstance(error, ModuleNotFoundError) and name in (*MOVED, *SPLIT, *REPLACED, "tuner.spec")


def bring_forward(folder: SweepFolder, callbacks: list[Any]) -> None:
    """Rewrite the sweep's ``tuner.pkl`` for this tuner, with ``callbacks`` as its Tune
    callbacks, and its searcher's saved state; each original is kept beside it (once: a
    second resume keeps the first)."""
    import ray.cloudpickle

    where = remote.join(folder.tune_uri, "tuner.pkl")
    original = folder.read_tune_file("tuner.pkl")
    try:
        state = read_pickle(original)
        state["_run_config"].callbacks = callbacks
    except Exception as error:  # not an earlier tuner's pickle after all
        raise TunerError(f"{where}: Tune's saved sweep cannot be read ({type(error).__name__}: {error})") from None
    kept = KEPT_SUFFIX["spec" if b"tuner.spec" in original else "0.1"]
    for name in folder.tune_file_names():
        if name.startswith(SEARCHER_STATE) and name.endswith(".pkl"):
            _rewrite(folder, name, kept, lambda data: ray.cloudpickle.dumps(read_pickle(data)))
    _rewrite(folder, "tuner.pkl", kept, lambda data: ray.cloudpickle.dumps(state))


def read_pickle(data: bytes) -> Any:
    """A pickle from the sweep folder, an earlier tuner's module names read as today's."""
    return _EarlierNames(io.BytesIO(data)).load()


def _rewrite(folder: SweepFolder, name: str, kept: str, today: Any) -> None:
    original = folder.read_tune_file(name)
    if b"tuner." not in original:
        return
    rewritten = today(original)
    if not folder.has_tune_file(name + kept):
        folder.write_tune_file(name + kept, original)
    folder.write_tune_file(name, rewritten)


def _replaced(*args: Any, **kwargs: Any) -> None:
    """A stand-in for a function only tuner 0.1's callbacks called; they are not kept."""


def _found_in_homes(name: str) -> Any:
    for home in HOMES:
        found = getattr(importlib.import_module(home), name, None)
        if found is not None:
            return found
    raise AttributeError(f"no tuner module has {name!r} now")


class _EarlierNames(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in RENAMED:
            module, name = RENAMED[(module, name)]
        elif module in SPLIT:
            return _found_in_homes(name)
        elif module in MOVED:
            module = MOVED[module]
        elif module in REPLACED:
            return _replaced
        found = super().find_class(module, name)
        if name == "subimport":  # how cloudpickle names the modules of code pickled by value
            return lambda wanted: types.ModuleType(wanted) if wanted in REPLACED else found(MOVED.get(wanted, wanted))
        return found
