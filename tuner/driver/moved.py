"""A sweep folder copied or moved since Tune last saved it: ``tuner resume`` writes to it,
never to where it was.

Tune's restore points the trials it restores at the folder it is given
(``TuneController._restore_trials``), but its search algorithm's saved state
(``tune/search_gen_state-*.json``, a pickle) keeps the storage of the folder it was saved in,
and each trial the searcher makes after the resume gets that storage: its checkpoints go to
the old folder if it is still there, and the trial errors ("Unable to set up cluster
storage") if it is not. So once Tune has read its own state, and before the restored sweep
starts (when Tune reads the searcher's), the saved states that name another place are
rewritten to name this folder, as Tune does for its trials.
"""

from __future__ import annotations

from typing import Any

from tuner.driver import earlier
from tuner.folder.store import SweepFolder

# Tune's SearchGenerator.CKPT_FILE_TMPL and BasicVariantGenerator's (random and grid search)
SEARCH_STATES = ("search_gen_state-", "basic-variant-state-")


def point_searcher_here(folder: SweepFolder) -> list[str]:
    """Rewrite the search algorithm's saved states in ``folder`` that name another folder;
    the names of those rewritten."""
    import ray.cloudpickle
    from ray.train._internal.storage import get_fs_and_path

    filesystem, path = get_fs_and_path(folder.tune_storage)
    rewritten = []
    for name in folder.tune_file_names():
        if not (name.startswith(SEARCH_STATES) and name.endswith(".json")):
            continue
        try:
            state = earlier.read_pickle(folder.read_tune_file(name))  # an earlier tuner's names too
        except Exception:  # noqa: BLE001 - not readable: Tune's own restore says so, for the one it reads
            continue
        elsewhere = [storage for storage in _storages(state) if storage.storage_fs_path != path]
        for storage in elsewhere:
            storage.storage_filesystem, storage.storage_fs_path = filesystem, path
        if elsewhere:
            folder.write_tune_file(name, ray.cloudpickle.dumps(state))
            rewritten.append(name)
    return rewritten


def _storages(state: Any) -> list[Any]:
    """The StorageContexts in a search algorithm's saved state: those its experiment's spec
    gives the trials it makes (Tune's objects only are looked into, not a searcher's model)."""
    from ray.train._internal.storage import StorageContext

    found, seen, todo = [], set(), [state]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, StorageContext):
            found.append(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list | tuple):
            todo.extend(item)
        elif type(item).__module__.startswith("ray.") and hasattr(item, "__dict__"):
            todo.extend(vars(item).values())
    return found
