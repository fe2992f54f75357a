"""The synthetic trial (tuner/trial/synthetic.py) and the scaling benchmark that uses it.

The curve's functions are pure; the sweep goes through the whole machinery for real
(the CLI, local Ray, MLflow in sqlite, TensorBoard, the export), with ASHA, whose
decisions the known curve makes predictable; the scaling script runs end to end on a
few trials and its figures are checked for consistency (never for speed).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from integration_helpers import tuner_cli

from tuner.trial import synthetic

REPO = Path(__file__).resolve().parents[2]


def test_the_rate_peaks_at_the_optimum_and_falls_off_in_log_lr():
    peak = synthetic.rate(synthetic.OPTIMUM_LR)
    assert peak == pytest.approx(synthetic.MAX_RATE)
    for factor in (3.0, 10.0):
        above, below = synthetic.rate(synthetic.OPTIMUM_LR * factor), synthetic.rate(synthetic.OPTIMUM_LR / factor)
        assert above == pytest.approx(below) and above < peak  # symmetric in decades
    assert synthetic.rate(synthetic.OPTIMUM_LR * 10) < synthetic.rate(synthetic.OPTIMUM_LR * 3)
    assert synthetic.rate(synthetic.OPTIMUM_LR, weight_decay=1e-2) < peak  # decay above the free level slows it


def test_the_curve_rises_to_the_ceiling_and_the_state_carries_it():
    clean = synthetic.curve(synthetic.OPTIMUM_LR, 0.0, 20)
    assert all(b > a for a, b in zip(clean, clean[1:], strict=False))
    assert synthetic.FLOOR < clean[0] < clean[-1] <= synthetic.CEILING
    assert clean[-1] == pytest.approx(synthetic.CEILING, abs=1e-6)
    # Ten epochs then ten more from the carried state: the same as twenty in one go (what
    # a checkpoint, PBT's exploit and a resume rely on).
    skill = 0.0
    for _ in range(10):
        skill = synthetic.step(skill, synthetic.OPTIMUM_LR)
    assert synthetic.expected_accuracy(skill) == pytest.approx(clean[9])
    for _ in range(10):
        skill = synthetic.step(skill, synthetic.OPTIMUM_LR)
    assert synthetic.expected_accuracy(skill) == pytest.approx(clean[19])


def test_the_noise_is_seeded_and_bounded():
    noisy = synthetic.curve(1e-3, 0.0, 10, noise=0.05, seed=7)
    assert noisy == synthetic.curve(1e-3, 0.0, 10, noise=0.05, seed=7)
    assert noisy != synthetic.curve(1e-3, 0.0, 10, noise=0.05, seed=8)
    assert all(0.0 <= value <= 1.0 for value in noisy)
    accuracy, loss = synthetic.observe(0.5, 0.0, 0, 1)
    assert loss == pytest.approx(-math.log(accuracy))


@pytest.mark.integration
def test_a_synthetic_sweep_goes_through_the_whole_machinery(tmp_path):
    """24 trials through the CLI with ASHA. With no noise a trial's rank is the same at
    every epoch, so ASHA must carry the trial nearest the optimum to max_t and stop most
    others early; every trial has its MLflow run and TensorBoard file; the best is exported."""
    from mlflow.tracking import MlflowClient

    sweep = {
        "name": "synthetic",
        "output_dir": str(tmp_path / "runs"),
        "data": {"dataset": "synthetic"},
        "model": {"name": "synthetic", "epoch_s": 0.0, "noise": 0.0},
        "train": {"epochs": 8},
        "space": {"params": {"lr": {"loguniform": [1.0e-4, 1.0e-1]}}},
        "searcher": {"name": "random"},
        "scheduler": {"name": "asha", "grace_period": 1, "reduction_factor": 2},
        "trials": {"num_samples": 24},
    }
    path = tmp_path / "synthetic.yaml"
    path.write_text(yaml.safe_dump(sweep))
    done = tuner_cli("sweep", str(path))
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path / "runs" / "synthetic"
    histories = {
        p.stem: [json.loads(line) for line in p.read_text().splitlines()] for p in (folder / "history").glob("*")
    }
    assert len(histories) == 24
    rate = {t: synthetic.rate(rows[0]["lr"]) for t, rows in histories.items()}
    fastest = max(rate, key=rate.get)
    assert len(histories[fastest]) == 8  # the best trial is never stopped
    stopped = [t for t, rows in histories.items() if len(rows) < 8]
    assert len(stopped) >= 12, f"ASHA stopped only {len(stopped)} of 24"
    for rows in histories.values():  # the reported values are the curve's, epoch by epoch
        expected = synthetic.curve(rows[0]["lr"], 0.0, len(rows))
        assert [row["val_accuracy"] for row in rows] == pytest.approx(expected)
    # Epochs of no time travel to Tune together: Tune was sent each trial's rungs (1, 2, 4)
    # and its last epoch as they came, and the epochs between with the next one sent.
    sent = {}
    for result_file in folder.glob("tune/*/result.json"):
        lines = [json.loads(line) for line in result_file.read_text().splitlines()]
        sent[lines[0]["trial_id"]] = [line["training_iteration"] for line in lines]
    assert set(sent) == set(histories)
    for trial, rows in histories.items():
        assert {1, 2, 4, len(rows)} & {*range(1, len(rows) + 1)} <= set(sent[trial]), (trial, sent[trial])
    assert sum(map(len, sent.values())) < sum(map(len, histories.values()))  # some came together
    best = json.loads((folder / "best" / "metrics.json").read_text())
    assert best["trial_id"] == fastest and best["epoch"] == 8
    events = list(folder.glob("tune/*/events.out.tfevents.*"))
    assert len(events) == 24
    state = json.loads((folder / "mlflow.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    runs = client.search_runs([state["experiment_id"]], f"tags.mlflow.parentRunId = '{state['parent_run_id']}'")
    assert len(runs) == 24
    for run in runs:  # every epoch of every trial reached MLflow (written in batches)
        trial = run.data.tags["tuner.trial_id"]
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")]
        assert sorted(steps) == list(range(1, len(histories[trial]) + 1))
        assert run.data.tags["tuner.status"] == ("finished" if len(histories[trial]) == 8 else "stopped_early")
    status = tuner_cli("status", str(folder))
    assert status.returncode == 0 and fastest in status.stdout


@pytest.mark.integration
def test_the_scaling_script_measures_every_contestant(tmp_path):
    """benchmarks/studies/scaling.py end to end on 3 trials: tuner and Optuna (Ray Tune's child is
    the same harness); the figures must add up, whatever their values."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [
        sys.executable,
        str(REPO / "benchmarks" / "studies" / "scaling.py"),
        "--trials",
        "3",
        "--epoch-s",
        "0.02",
    ]
    command += ["--only", "tuner", "--only", "optuna", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    for name in ("tuner", "optuna"):
        result = report["results"][name]["3"]
        assert result["trials"] == 3
        assert result["floor_s"] == pytest.approx(3 * 10 * 0.02 / 2)
        assert result["floor_s"] < result["wall_s"]
        assert 0 <= result["fixed_s"] < result["wall_s"]
        assert result["result_cycle_overhead_ms"] > -5  # a cycle is never much shorter than its sleep
        assert synthetic.FLOOR < result["best_val_accuracy"] <= 1.0
        assert result["driver_cpu_s"] > 0 and result["driver_peak_rss_mb"] > 0
    tuner = report["results"]["tuner"]["3"]
    assert set(tuner["read_commands_s"]) == {"status", "best", "report"}
    assert tuner["mlflow_calls"] > 0 and tuner["mlflow_db_mb"] > 0
    assert "| tuner | 3 |" in (tmp_path / "out" / "results.md").read_text()
