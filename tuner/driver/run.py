"""One command's go at a sweep: what it runs, in which folder, with which data and code, and
whether it begins the sweep, resumes it or extends it. Made once by ``run_sweep`` and handed
down whole (Ray's start, the trials' placement, the Tuner), in place of a dozen parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tuner.cluster.connect import CLUSTER_TIMEOUT_S
from tuner.folder.store import SweepFolder
from tuner.search.base import Evaluated
from tuner.sweepfile.schema import SweepConfig

if TYPE_CHECKING:
    from tuner.trial.session import TrialHooks

Mode = Literal["new", "resume", "extend"]


@dataclass
class Run:
    sweep: SweepConfig  # the trials to run (an extension: its new part's)
    folder: SweepFolder  # an extension: the new part of the sweep folder
    mode: Mode
    data: Any = None  # the planned data (tuner.driver.inputs.load_data); None: the trials take none
    code: Any = None  # the user's code as the sweep began with it (tuner.usercode.snapshot)
    hooks: TrialHooks | None = None  # tests' seams in every trial (tuner/trial/testing.py)
    evaluated: list[Evaluated] | None = None  # a warm start's earlier trials, told to the searcher first
    address: str | None = None  # the cluster to join; None: the warm local Ray if up, else one of the command's own
    verbose: bool = False  # Ray's own output and tables instead of tuner's view
    cluster_timeout_s: float = CLUSTER_TIMEOUT_S
    # the trainable or objective as a function object (tuner.run(..., trainable=fn) from a
    # notebook): sent to the trials by value, as Ray sends a function; None: imported by name
    function: Any = None
    warm: str | None = None  # set by the driver: the warm local Ray's address it joined (tuner ray up)

    @property
    def resume(self) -> bool:
        return self.mode == "resume"

    @property
    def searcher_from(self) -> str | None:
        """An extension's searcher goes on from what the last part's had learned: its Tune experiment."""
        return self.folder.parts()[-2].tune_uri if self.mode == "extend" else None
