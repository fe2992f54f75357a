"""A real browser opens the MLflow UI that ``tuner ui`` serves and sees the sweep's runs.

Needs Debian's chromium (``.ci/run`` installs it); skipped with a reason when absent.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from integration_helpers import recorded_sweep, running_ui

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)"),
]


def _render(url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=20000",
            "--window-size=1400,900",
            *extra,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_mlflow_ui_lists_the_parent_run_with_its_nested_trials(tmp_path):
    output, record = recorded_sweep(tmp_path, trials=3)
    with running_ui(output) as (_, mlflow_url, _tb):
        page = f"{mlflow_url}/#/experiments/{record.experiment_id}/runs"
        dom = _render(page, "--dump-dom").stdout
        screenshot = tmp_path / "runs.png"
        _render(page, f"--screenshot={screenshot}")
    # The rendered table: the parent run by name, and MLflow's count of 1 parent + 3 children.
    assert "ui_check" in dom
    assert re.search(r">4(?:<[^>]*>|\s)*matching runs", dom), "the runs table does not count 4 runs"
    assert screenshot.is_file() and screenshot.stat().st_size > 10_000
