"""Where a submitted Ray Job finds its files on the cluster.

``tuner submit`` ships a copy of the tuner package as the job's ``py_modules`` entry: every
node unpacks it once and reuses it while it is there. The job's own files travel inside that
copy, in ``_job/``: the sweep file, the search-space registry and the user's code. They do not travel as a
``working_dir``. On a host with several Ray nodes, each node's runtime-env agent deletes a
working_dir and unpacks it again the first time that node needs it, under the processes
already running there (docs/ray-notes.md, "Jobs on several nodes of one host").

In a source checkout ``_job/`` does not exist, and the usual places apply.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the tuner package
JOB_FILES = PACKAGE_DIR / "_job"
JOB_CODE = "code"  # the user's code, in _job/ beside the sweep file (its code_dir there)


def registry_dir() -> Path:
    """``search_spaces/``: the job's copy when tuner runs as a submitted job, else the checkout's."""
    shipped = JOB_FILES / "search_spaces"
    return shipped if shipped.is_dir() else PACKAGE_DIR.parent / "search_spaces"


def submitted_file(name: str) -> Path | None:
    """The sweep file a job was submitted with, when ``name`` is its bare file name."""
    if Path(name).parent != Path("."):
        return None
    candidate = JOB_FILES / name
    return candidate if candidate.is_file() else None
