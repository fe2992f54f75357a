"""Work that Tune's loop hands to a thread of the driver: file writes no trial waits on.

Every trial waits on Tune's loop twice between one trial and the next (its last report is
answered only once the driver has handled it; the next trial starts only after the
callbacks of its start), and the loop is one thread. A trial's TensorBoard file, Tune's
JSON and CSV files and the deletion of its pruned checkpoints took 11 ms a trial there at
300 trials (5, 2.2 and 3.6 ms; benchmarks/README.md, issue 43), mostly in file system
calls, which release the GIL: on a thread of their own they run while the loop waits on Ray.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class Later:
    """One daemon thread that runs what it is handed, in order, from the first ``do``.

    A call that raised is raised again (once) at the next ``do`` or ``wait``: a failed write
    still stops what it would have stopped, a step later. Held by a module, not by the
    callbacks that use it (Tune pickles those with the experiment)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.work: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | threading.Event] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    def do(self, function: Callable[..., Any], *args: Any) -> None:
        self._raise_failure()
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self.thread.start()
        self.work.put((function, args))

    def wait(self, raising: bool = True) -> None:
        """Until everything handed so far is done; raises what failed (``raising``; else it
        stays for the next ``do`` or ``wait`` to raise)."""
        if self.thread is not None:
            done = threading.Event()
            self.work.put(done)
            while not done.wait(timeout=1.0):
                if not self.thread.is_alive():  # (only an interpreter at its exit stops a daemon)
                    break
        if raising:
            self._raise_failure()

    def _raise_failure(self) -> None:
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure

    def _run(self) -> None:
        while True:
            item = self.work.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            function, args = item
            try:
                function(*args)
            except BaseException as error:  # noqa: BLE001 (raised again in the loop's thread)
                if self.failure is None:
                    self.failure = error


# The driver's one thread for the trials' files (TensorBoard's, Tune's JSON and CSV) and
# the deletion of their pruned checkpoints (tuner/tracking/callbacks.py, driver/callbacks.py).
TRIAL_FILES = Later("tuner-trial-files")
