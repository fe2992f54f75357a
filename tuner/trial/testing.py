"""Trial hooks for tuner's own tests (``run_sweep(..., hooks=...)``): faults injected at a
known point, so that retries, resumes and GPU placement can be checked on a CPU machine.

They live in the package because every trial (and every Ray Train worker) unpickles them:
the Ray workers import them from here. Nothing in tuner passes them; tests do.
"""

from __future__ import annotations

from pathlib import Path

from tuner.trial.session import TrialHooks


class FailOnceAt(TrialHooks):
    """A trial raises once, after training epoch ``epoch``: its retry (or a resume) must go
    on from its last checkpoint. ``marker_dir`` keeps a file per trial that has failed, so
    the retry, in a new process, does not fail again."""

    def __init__(self, epoch: int, marker_dir: str | Path):
        self.epoch, self.marker_dir = epoch, str(marker_dir)

    def marker(self, trial_id: str) -> Path:
        return Path(self.marker_dir) / f"{trial_id}.failed-once"

    def after_epoch(self, trial_id: str, epoch: int) -> None:
        marker = self.marker(trial_id)
        if epoch == self.epoch and not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("failed once on purpose\n")
            raise RuntimeError(f"injected fault at epoch {epoch} (tuner.trial.testing.FailOnceAt)")


class TrainOnCpu(TrialHooks):
    """Ray was told of GPUs the machine does not have: trials take GPU slots, train on the CPU."""

    train_on_cpu = True
