"""``python -m tuner ...`` with every trial failing once after epoch EPOCH (the retry goes on
from its checkpoint): ``python tuner_with_fault.py EPOCH MARKER_DIR sweep FILE ...``.

The fault is a trial hook (tuner.trial.testing.FailOnceAt) handed to the sweep as a test
would hand it to ``run_sweep``; tuner itself reads no test switch from the environment.
"""

import functools
import sys

from tuner.driver import sweep
from tuner.trial.testing import FailOnceAt

if __name__ == "__main__":
    epoch, marker_dir, *argv = sys.argv[1:]
    sweep.run_sweep = functools.partial(sweep.run_sweep, hooks=FailOnceAt(int(epoch), marker_dir))
    from tuner.cli import main

    raise SystemExit(main(argv))
