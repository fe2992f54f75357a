from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if "TUNER_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["TUNER_DATA_DIR"] = str(SHARED_DATA)


@pytest.fixture(scope="module")
def local_ray():
    """One real local Ray per test module: 2 CPUs, dashboard on 127.0.0.1 (see NOTES-ray.md)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False)
    yield ray
    ray.shutdown()
