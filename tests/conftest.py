from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if "TUNER_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["TUNER_DATA_DIR"] = str(SHARED_DATA)
# Every sweep in the tests writes to the sqlite store beside its own outputs.
os.environ.pop("MLFLOW_TRACKING_URI", None)


@pytest.fixture(autouse=True)
def _no_tracking_uri_leak():
    """A test that leaves MLFLOW_TRACKING_URI set would send later sweeps to its store."""
    yield
    assert "MLFLOW_TRACKING_URI" not in os.environ, "a test leaked MLFLOW_TRACKING_URI"


@pytest.fixture(scope="module")
def local_ray():
    """One real local Ray per test module: 2 CPUs, dashboard on 127.0.0.1 (docs/ray-notes.md: the dashboard frees stopped trials' CPUs)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(params=["direct", "torch_trainer"])
def runner(request) -> str:
    """Both ways a one-worker trial runs (scaling.runner): behaviour must be the same."""
    return request.param
