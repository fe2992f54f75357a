"""The sweep folder, the one owner of where files live: a local path or a storage URI, its
atomic and locked writes, the history, the timeline, the trial -> run map and "best"."""
