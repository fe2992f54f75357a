"""The sweep folder, the one owner of where files live: a local path or a storage URI, its
atomic and locked writes, the history, the timeline, the trial -> run map and "best"."""

import os
from pathlib import Path


def cache_root() -> Path:
    """Where tuner keeps what it can make again (decoded data sets, working copies of remote
    folders, MLflow's empty schema): ``$TUNER_CACHE_DIR``, else ``~/.cache/tuner``."""
    return Path(os.environ.get("TUNER_CACHE_DIR") or Path.home() / ".cache" / "tuner")
