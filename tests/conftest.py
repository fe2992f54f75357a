from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if "TUNER_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["TUNER_DATA_DIR"] = str(SHARED_DATA)
# Every sweep in the tests writes to the sqlite store beside its own outputs.
os.environ.pop("MLFLOW_TRACKING_URI", None)
# A warm local Ray of the user's (`tuner ray up`, in ~/.tuner) is not the tests' to join:
# their commands look for one in a folder of the session's own.
os.environ["TUNER_HOME"] = tempfile.mkdtemp(prefix="tuner-home-")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with integration tests first, in their order, then the rest: with two workers
    taking a module at a time, the quick modules fill the end rather than a long one."""
    slow = {item.module.__name__ for item in items if item.get_closest_marker("integration")}
    items.sort(key=lambda item: item.module.__name__ not in slow)  # stable


_MODULE_S: dict[str, float] = {}  # a module's time: its tests' setup, call and teardown
_WORKER_SPAN: dict[str, list[float]] = {}  # a worker's first start and last stop


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _MODULE_S[module] = _MODULE_S.get(module, 0.0) + report.duration
    worker = getattr(getattr(report, "node", None), "gateway", None)
    span = _WORKER_SPAN.setdefault(worker.id if worker else "main", [report.start, report.stop])
    span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the suite's minutes go, a module at a time, and when each worker ended: the
    order above (``pytest_collection_modifyitems``) is only as good as the slowest module
    taken last."""
    if len(_MODULE_S) < 2:
        return
    write = terminalreporter.write_line
    terminalreporter.section("slowest modules")
    for module, took in sorted(_MODULE_S.items(), key=lambda item: -item[1])[:25]:
        write(f"{took:8.1f}s  {module}")
    began = min(start for start, _ in _WORKER_SPAN.values())
    for worker, (start, stop) in sorted(_WORKER_SPAN.items()):
        write(f"{worker}: busy from {start - began:.0f} s to {stop - began:.0f} s")


def require(condition: bool, reason: str) -> None:
    """Skip a test whose real inputs are missing on a user's machine; on CI (``CI`` set, as
    .ci/run's callers do) fail instead, so that a missing data set cannot hide the suite."""
    if condition:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI is set: required there)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _no_tracking_uri_leak():
    """A test that leaves MLFLOW_TRACKING_URI set would send later sweeps to its store."""
    yield
    assert "MLFLOW_TRACKING_URI" not in os.environ, "a test leaked MLFLOW_TRACKING_URI"


@pytest.fixture(scope="module")
def local_ray():
    """One real local Ray per test module: 2 CPUs, dashboard on 127.0.0.1 (it frees stopped
    trials' CPUs: docs/ray-notes.md)."""
    import ray

    from tuner.cluster.connect import stop_ray

    ray.init(address="local", num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False)
    yield ray
    stop_ray()  # tuner's own stop: ray.shutdown less its 1 s wait on the monitor


@pytest.fixture(scope="module")
def warm_ray(tmp_path_factory):
    """A warm local Ray (``tuner ray up``, as a user keeps one between sweeps) that the
    module's commands join, as theirs do: for modules whose tests are about what a sweep
    does, not how its Ray starts. A command that joins saves Ray's start and stop, about
    14 of a ``--smoke`` sweep's 53 CPU-s on 2 cores. Ray's own start, a kill of the whole
    group with its Ray, and in-process sweeps (``local_ray``) are tested elsewhere with a
    Ray of their own; tests/cli/test_warm_ray.py tests the warm Ray itself."""
    from integration_helpers import tuner_cli

    home = tmp_path_factory.mktemp("warm-home")
    env = {"TUNER_HOME": str(home)}
    up = tuner_cli("ray", "up", env=env, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    before = os.environ["TUNER_HOME"]
    os.environ["TUNER_HOME"] = str(home)
    try:
        yield home
    finally:
        os.environ["TUNER_HOME"] = before
        down = tuner_cli("ray", "down", env=env, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr


@pytest.fixture(params=["direct", "torch_trainer"])
def runner(request) -> str:
    """Both ways a one-worker trial runs (scaling.runner): behaviour must be the same."""
    return request.param


@pytest.fixture
def ray_tmp():
    """A Ray temp dir of the test's own, so the processes a SIGKILL orphans can be found
    by it and stopped without touching any other Ray on the machine (short: socket paths)."""
    folder = Path(tempfile.mkdtemp(prefix="tr", dir="/tmp"))
    yield folder
    from integration_helpers import kill_ray_under

    kill_ray_under(folder)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)``: a real tmpfs of that size (``"1m"``) mounted under ``tmp_path``, to
    fill up for real; unmounted after the test. Needs root (CI runs as root)."""
    import subprocess

    mounted = []

    def mount(size: str) -> Path:
        folder = tmp_path / f"tmpfs{len(mounted)}"
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
        require(done.returncode == 0, f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=True)
