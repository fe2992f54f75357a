"""The command line: ``python -m tuner sweep mnist_asha.yaml`` and friends, a module per
subject, each adding its commands beside their handlers: running a sweep (running), reading
its folder (read), Ray Jobs on a cluster (cluster), serving its model (serve).

A user error prints one line and exits 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from typing import NoReturn

from tuner.cli import cluster, read, running, serve
from tuner.cli.common import Commands
from tuner.errors import TunerError
from tuner.invocation import tuner_command

EXIT_USER_ERROR = 2
SUBJECTS = (running, read, cluster, serve)
# The order ``tuner --help`` lists the commands in, whichever subject adds them.
HELP_ORDER = (
    "sweep submit jobs stop ray resume extend status best export predict serve report ui validate schema"
).split()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tuner", description="Hyperparameter sweeps on Ray Tune from one YAML file.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    subparsers = parser.add_subparsers(dest="command", required=True)
    commands: Commands = {}
    for subject in SUBJECTS:
        subject.register(commands)
    for name in sorted(commands, key=HELP_ORDER.index):  # a command missing from HELP_ORDER fails here
        commands[name](subparsers)
    return parser


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has closed it."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture)
        return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        code = handler(args)
        sys.stdout.flush()  # a reader gone away is met here, not in Python's flush at exit
        return code
    except BrokenPipeError:
        if not _stdout_reader_gone():  # another pipe (a server's, a child's): not this one
            raise
        # ``tuner best runs/x | head -2``: the reader has what it wanted. Exit quietly, as
        # ``git log | head`` does; what is still buffered for stdout goes to os.devnull.
        from tuner.driver.progress import quiet_stdout

        quiet_stdout()
        return 0
    except TunerError as error:
        if args.debug:
            raise
        print(f"tuner: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("tuner: interrupted", file=sys.stderr)
        return 130
    except OSError as error:
        from tuner.folder.store import MACHINE_ERRNOS

        if args.debug or error.errno not in MACHINE_ERRNOS:  # the machine refused a write or a read
            raise
        where = f"{error.filename}: " if error.filename else ""
        print(f"tuner: error: {where}{error.strerror}; what was recorded before it is kept", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as error:
        from tuner.driver.signals import SweepInterrupted

        if not isinstance(error, SweepInterrupted):
            raise
        print(f"tuner: {error}; continue it with: {tuner_command()} resume {error.folder}", file=sys.stderr)
        return 130


def run() -> NoReturn:
    """``python -m tuner`` and the ``tuner`` script: main(), then the process ends."""
    leave(main())


def leave(code: int) -> NoReturn:
    """End the process with ``code``, skipping Python's last garbage collection at exit.

    That collection walks every object Ray, Tune, torch and MLflow made, to free memory the
    OS takes back anyway: 2.2 s after a small sweep on 2 cores, 0.3 s frozen. Exit handlers
    (Ray's shutdown, MLflow's, logging's) and the flush of stdout and stderr still run; what
    tuner writes is closed before main() returns.
    """
    gc.freeze()
    sys.exit(code)
