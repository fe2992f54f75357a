"""GPU slots decide how many trials run at once. The GPUs are declared to Ray on this CPU
machine (the TrainOnCpu hook trains on the CPU while Ray reserves the GPUs); the
trials that ran at once are counted from the sweep's timeline."""

from __future__ import annotations

import pytest
from integration_helpers import assert_no_leaks, small_sweep

from tuner.driver.sweep import run_sweep
from tuner.folder.records import read_timeline
from tuner.sweepfile.schema import SweepConfig
from tuner.trial.testing import TrainOnCpu

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def gpu_ray():
    import ray

    ray.init(
        address="local", num_cpus=4, num_gpus=2, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False
    )
    yield ray
    ray.shutdown()


def _most_at_once(timeline: list[dict]) -> int:
    running, most = set(), 0
    for event in sorted(timeline, key=lambda e: e["time"]):
        if event["event"] == "start":
            running.add(event["trial_id"])
        elif event["event"] in ("end", "error"):
            running.discard(event["trial_id"])
        most = max(most, len(running))
    return most


def test_half_a_gpu_per_trial_runs_four_trials_on_two_gpus(gpu_ray, tmp_path):
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            train={"epochs": 3},
            trials={"num_samples": 6},
            scaling={"use_gpu": "auto", "gpus_per_worker": 0.5, "cpus_per_worker": 0.5},
        )
    )
    outcome = run_sweep(sweep, hooks=TrainOnCpu())
    assert not outcome.results.errors
    timeline = read_timeline(outcome.folder)
    assert len({e["trial_id"] for e in timeline if e["event"] == "end"}) == 6
    # 8 trials' worth of CPUs, 4 of GPU halves: the GPUs decide, and all four slots get used.
    assert _most_at_once(timeline) == 4
    assert_no_leaks()


def test_a_trial_of_two_workers_with_a_gpu_each_waits_for_two_free_gpus(gpu_ray, tmp_path):
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            data={"train_subset": 600},  # what counts is where the workers were placed, not the training
            train={"epochs": 1},
            trials={"num_samples": 2},
            scaling={"use_gpu": True, "workers": 2, "gpus_per_worker": 1, "cpus_per_worker": 1},
        )
    )
    outcome = run_sweep(sweep, hooks=TrainOnCpu())
    assert not outcome.results.errors
    timeline = read_timeline(outcome.folder)
    assert len({e["trial_id"] for e in timeline if e["event"] == "end"}) == 2
    # The CPUs would hold two such trials; the two GPUs hold one.
    assert _most_at_once(timeline) == 1
    assert all(row["world_size"] == 2 for row in outcome.results.get_dataframe().to_dict("records"))
    assert_no_leaks()
