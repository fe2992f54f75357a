"""A user's command under ``scaling.workers > 1``: started once per Ray Train worker with
torch.distributed's ``env://`` variables, as torchrun starts a script (an unchanged DDP
script's ``init_process_group()`` finds its peers), rank 0's printed lines the reports.

Train's workers already share a process group (TorchConfig's, on its own port): through it
rank 0 hands every rank the address and a free port of its node for the commands' group,
and then, every ``TICK_S``, every rank tells the others how its command is doing
(``all_gather_object``). All act on the same gathered states, so they stay in step:

- each of rank 0's new metric lines is one ``context.report`` on every rank (Ray Train
  wants a report from every worker, in the same order: its checkpoint barrier);
- a command that exits non-zero on any rank fails the trial with that rank's last line
  (the first to fail: the others' usually follow it with their peer's broken connection),
  every rank's command stopped (SIGTERM to its group, SIGKILL after the grace);
- the trial ends when every rank's command has ended.

A rank's output goes to ``command.log`` (rank 0) or ``command-rank<N>.log`` in its own trial
folder. A scheduler's stop kills the workers; their commands' guards end them.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.trial.command_process import free_port, pump, shown, started, torch_env
from tuner.trial.context import Context, TrialCodeError

if TYPE_CHECKING:
    from tuner.trial.command import Lines

TICK_S = 0.2  # how often the ranks compare notes: a report reaches Tune within about this
SETTLE_TICKS = 25  # after a failure, ticks the other commands get to end by themselves (their errors)


@dataclasses.dataclass
class RankState:
    """What a rank tells the others each tick (pickled through the process group)."""

    reports: list[tuple[dict[str, float], str | None]]  # rank 0's new lines: metrics, staged checkpoint
    code: int | None  # the command's exit status once it ended
    ended_at: float | None
    last: str  # its last printed line
    log: str


class _Command:
    """One rank's command, its output read in a thread of its own."""

    def __init__(self, log: Path, lines: Lines | None, checkpoints: Path):
        self.log, self.lines, self.checkpoints = log, lines, checkpoints
        self._lock = threading.Lock()
        self._reports: list[tuple[dict[str, float], str | None]] = []
        self._code: int | None = None
        self._ended_at: float | None = None
        self._last = ""

    def watch(self, process: Any) -> None:
        """The reading thread: every line to the log, rank 0's metric lines queued as reports."""
        last = ""
        try:
            with open(self.log, "ab") as log:
                last = pump(process, log, self._read if self.lines is not None else None)
            code = process.wait()
        except Exception as error:  # noqa: BLE001 - the trial fails with it, not this thread alone
            code, last = -1, f"tuner could not read the command's output: {error!r}"
        with self._lock:
            self._code, self._ended_at, self._last = code, time.time(), last

    def _read(self, text: str) -> None:
        metrics = self.lines.read(text)
        if metrics is None:
            return
        staged = None
        if any(self.checkpoints.iterdir()):  # as it is now: the script may write the next epoch's soon
            staged = tempfile.mkdtemp(prefix="tuner-command-checkpoint-")
            shutil.copytree(self.checkpoints, staged, dirs_exist_ok=True)
        with self._lock:
            self._reports.append((metrics, staged))

    def state(self) -> RankState:
        with self._lock:
            reports, self._reports = self._reports, []
            return RankState(reports, self._code, self._ended_at, self._last, str(self.log))


def run(context: Context, argv: list[str], env: dict[str, str], lines: Lines, checkpoints: Path) -> None:
    """This rank's command, in step with the trial's other ranks (module docstring)."""
    import ray.train
    import torch.distributed as dist

    if not dist.is_initialized():
        raise TrialCodeError("command: scaling.workers > 1, but Ray Train set up no process group for the workers")
    group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")  # objects go through gloo
    train = ray.train.get_context()
    chosen: list[Any] = [None]
    if context.rank == 0:
        address = ray.util.get_node_ip_address()
        chosen = [(address, free_port(address))]
    dist.broadcast_object_list(chosen, src=0, group=group)
    address, port = chosen[0]
    env = {
        **env,
        **torch_env(
            rank=context.rank,
            world=context.world_size,
            local_rank=train.get_local_rank(),
            local_world=train.get_local_world_size(),
            node_rank=train.get_node_rank(),
            address=address,
            port=port,
        ),
    }
    name = "command.log" if context.rank == 0 else f"command-rank{context.rank}.log"
    command = _Command(context.trial_dir / name, lines if context.rank == 0 else None, checkpoints)
    with started(argv, env, context.trial_dir) as process:
        reader = threading.Thread(target=command.watch, args=(process,), name="command-output", daemon=True)
        reader.start()
        failed = _in_step(context, command, group)
    reader.join()
    if failed is not None:
        rank, state = failed
        where = f" on rank {rank}" if rank else ""
        last = f": {state.last}" if state.last else ""
        raise TrialCodeError(f"command exited with status {state.code}{where}{last} ({shown(Path(state.log))})")
    if context.reports == 0:
        raise lines.missing(Path(command.log))


def _in_step(context: Context, command: _Command, group: Any) -> tuple[int, RankState] | None:
    """Compare notes every tick until every command ended: rank 0's lines reported on every
    rank; the first rank whose command failed (with its state), or None."""
    import torch.distributed as dist

    settling = None  # ticks left for the other commands to end after a failure
    while True:
        states: list[Any] = [None] * context.world_size
        dist.all_gather_object(states, command.state(), group=group)
        for metrics, staged in states[0].reports:
            try:
                context.report(metrics, checkpoint=staged if context.rank == 0 else None)
            finally:
                if staged is not None and context.rank == 0:
                    shutil.rmtree(staged, ignore_errors=True)
        ended = [state.code is not None for state in states]
        failures = [(rank, state) for rank, state in enumerate(states) if state.code not in (None, 0)]
        if failures and settling is None:
            settling = SETTLE_TICKS
        if all(ended) or settling == 0:
            return min(failures, key=lambda failure: failure[1].ended_at) if failures else None
        if settling is not None:
            settling -= 1
        time.sleep(TICK_S)
