"""Sweeps that tuner 0.1 started, before its package layout: ``tuner resume`` goes on
with them.

Tune keeps a sweep's settings in ``tune/tuner.pkl``, a pickle that names the modules of
the tuner that made it (``tuner.store``, ``tuner.config``, ...) and holds that version's
Tune callbacks. Read with those names mapped to today's modules, it gets today's
callbacks in place of the old ones and is written back; the original stays beside it as
``tuner.pkl.tuner-0.1``. Nothing else in the folder names a module.
"""

from __future__ import annotations

import io
import pickle
import types
from typing import Any

from tuner.errors import TunerError
from tuner.folder import remote
from tuner.folder.store import SweepFolder

KEPT_SUFFIX = ".tuner-0.1"
# Modules that moved whole: the same classes under a new name (the sweep file's models,
# the YAML origin, tuner's HyperBand and BOHB schedulers).
MOVED = {
    "tuner.config": "tuner.spec.config",
    "tuner.yamlio": "tuner.spec.yamlio",
    "tuner.spaces": "tuner.spec.spaces",
    "tuner.hyperband": "tuner.spec.hyperband",
    "tuner.searchers": "tuner.spec.searchers",
    "tuner.schedulers": "tuner.spec.schedulers",
}
RENAMED = {("tuner.store", "SweepPaths"): ("tuner.folder.store", "SweepFolder")}
# What only the old callbacks' code used: read as stand-ins, then dropped with them.
REPLACED = ("tuner.store", "tuner.progress", "tuner.tracking")


def made_by_tuner_0_1(error: BaseException) -> bool:
    """Whether restoring failed on a module name tuner 0.1 had and this tuner has not."""
    name = getattr(error, "name", None) or ""
    return isinstance(error, ModuleNotFoundError) and name in (*MOVED, *REPLACED)


def bring_forward(paths: SweepFolder, callbacks: list[Any]) -> None:
    """Rewrite the sweep's ``tuner.pkl`` for this tuner, with ``callbacks`` as its Tune
    callbacks; the original is kept beside it (once: a second resume keeps the first)."""
    import ray.cloudpickle

    where = remote.join(paths.tune_uri, "tuner.pkl")
    original = paths.read_tune_file("tuner.pkl")
    try:
        state = _EarlierNames(io.BytesIO(original)).load()
        state["_run_config"].callbacks = callbacks
    except Exception as error:  # not a tuner 0.1 pickle after all
        raise TunerError(f"{where}: Tune's saved sweep cannot be read ({type(error).__name__}: {error})") from None
    if not paths.has_tune_file(f"tuner.pkl{KEPT_SUFFIX}"):
        paths.write_tune_file(f"tuner.pkl{KEPT_SUFFIX}", original)
    paths.write_tune_file("tuner.pkl", ray.cloudpickle.dumps(state))


def _replaced(*args: Any, **kwargs: Any) -> None:
    """A stand-in for a function only tuner 0.1's callbacks called; they are not kept."""


class _EarlierNames(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in RENAMED:
            module, name = RENAMED[(module, name)]
        elif module in MOVED:
            module = MOVED[module]
        elif module in REPLACED:
            return _replaced
        found = super().find_class(module, name)
        if name == "subimport":  # how cloudpickle names the modules of code pickled by value
            return lambda wanted: types.ModuleType(wanted) if wanted in REPLACED else found(MOVED.get(wanted, wanted))
        return found
