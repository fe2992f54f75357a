"""The sweep folder, the one owner of where files live: a local path or a storage URI, its
atomic and locked writes, the history, the timeline, the trial -> run map and "best"."""

import os
from pathlib import Path

# A result's key naming the checkpoint folder a trial wrote into its own folder itself
# (tuner.trial.session.write_own_checkpoint; Tune sets its checkpoint_dir_name to None when
# it was given none): folder.records keeps it in the history as checkpoint_dir_name. Here,
# not there, so that a trial's process does not import the records to name it.
OWN_CHECKPOINT = "own_checkpoint"
# The mark of an objective's returned value in its trial's last report (tuner/trial/optuna_api.py):
# the trial's value, as its Optuna study takes it (folder.records.best_epoch).
RETURNED = "returned"
# A result's list of the epochs before it that the trial held back (tuner.trial.runner's
# _TuneSession.report: epochs shorter than a round trip through Tune's loop is worth), each
# with how long before the result's epoch it was reported: folder.records.epochs_in unpacks them.
EARLIER_EPOCHS = "earlier_epochs"
HELD_S = "held_s"


def cache_root() -> Path:
    """Where tuner keeps what it can make again (decoded data sets, working copies of remote
    folders, MLflow's empty schema): ``$TUNER_CACHE_DIR``, else ``~/.cache/tuner``."""
    return Path(os.environ.get("TUNER_CACHE_DIR") or Path.home() / ".cache" / "tuner")
