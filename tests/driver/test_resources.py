"""The resource arithmetic: GPUs used or not, how many trials fit at once, and what each
trial's driver and workers ask Ray for (declared resources, no Ray started)."""

from __future__ import annotations

import os

import pytest

from tuner.driver.plan import concurrent_trials, decide_gpu
from tuner.errors import TunerError
from tuner.sweepfile.schema import SweepConfig
from tuner.trial.runner import WORKER_CPU_TOKEN, TrialSetup, trial_bundles, worker_resources


def _sweep(**scaling) -> SweepConfig:
    trials = {"max_concurrent": scaling.pop("max_concurrent")} if "max_concurrent" in scaling else {}
    return SweepConfig.model_validate({"name": "r", "scaling": scaling, "trials": trials})


@pytest.mark.parametrize(
    "use_gpu, gpus, expected",
    [("auto", 0, False), ("auto", 2, True), (False, 2, False), (True, 1, True)],
)
def test_use_gpu_auto_follows_the_cluster(use_gpu, gpus, expected):
    assert decide_gpu(_sweep(use_gpu=use_gpu), {"CPU": 8, "GPU": gpus}) is expected


def test_use_gpu_true_on_a_cluster_without_gpus_is_one_clear_error():
    with pytest.raises(TunerError, match="scaling.use_gpu is true, but the Ray cluster has no GPU"):
        decide_gpu(_sweep(use_gpu=True), {"CPU": 8})


@pytest.mark.parametrize(
    "scaling, cluster, use_gpu, slots",
    [
        ({}, {"CPU": 2}, False, 2),  # the default: one CPU per trial
        ({"workers": 2}, {"CPU": 2}, False, 1),
        ({"workers": 2, "cpus_per_worker": 0.5}, {"CPU": 2}, False, 2),
        ({"max_concurrent": 1}, {"CPU": 8}, False, 1),
        ({}, {"CPU": 16, "GPU": 4}, True, 4),  # GPUs are the bottleneck
        ({"gpus_per_worker": 0.25}, {"CPU": 16, "GPU": 1}, True, 4),  # four small trials share a GPU
        ({"gpus_per_worker": 0.25}, {"CPU": 2, "GPU": 1}, True, 2),  # ... unless the CPUs run out first
        ({"workers": 2}, {"CPU": 16, "GPU": 3}, True, 1),  # 2 workers x 1 GPU: one trial, one GPU idle
        ({"workers": 2, "gpus_per_worker": 0.5}, {"CPU": 16, "GPU": 3}, True, 3),
    ],
)
def test_trials_at_once_are_the_scarcest_resource_over_one_trials_need(scaling, cluster, use_gpu, slots):
    assert concurrent_trials(_sweep(**scaling), cluster, use_gpu) == slots


@pytest.mark.parametrize(
    "scaling, cluster, use_gpu, message",
    [
        ({"workers": 4}, {"CPU": 2}, False, r"one trial needs 4 CPUs .* but the Ray cluster has 2"),
        ({"workers": 2}, {"CPU": 16, "GPU": 1}, True, r"one trial needs 2 GPUs .* but the Ray cluster has 1"),
    ],
)
def test_a_trial_bigger_than_the_cluster_is_refused(scaling, cluster, use_gpu, message):
    with pytest.raises(TunerError, match=message):
        concurrent_trials(_sweep(**scaling), cluster, use_gpu)


def _setup(workers: int, use_gpu: bool, direct: bool, cpus: float = 1.0, gpus: float = 0.5) -> TrialSetup:
    return TrialSetup("cnn", {}, {}, workers, use_gpu, cpus, gpus, "", 0, direct=direct)


def test_a_direct_trial_reserves_its_cpus_and_gpu_share_itself():
    assert trial_bundles(_setup(1, True, True), 64) == [{"CPU": 1.0, "GPU": 0.5, "memory": 64}]
    assert trial_bundles(_setup(1, False, True, cpus=2), 64) == [{"CPU": 2, "memory": 64}]


def test_a_torch_trainer_trial_reserves_one_bundle_per_worker_and_its_workers_a_token_each():
    setup = _setup(3, True, False, cpus=2)
    bundles, worker = trial_bundles(setup, 64), worker_resources(setup)
    assert len(bundles) == 3 and bundles[0]["memory"] == 64  # the driver runs in bundle 0
    assert all(bundle["CPU"] + worker["CPU"] == pytest.approx(2) for bundle in bundles)  # per node, exactly
    assert worker == {"CPU": WORKER_CPU_TOKEN, "GPU": 0.5}
    assert "GPU" not in worker_resources(_setup(3, False, False))


@pytest.mark.parametrize(
    "direct, use_gpu, user_cap, expected",
    [
        (True, True, None, 0),  # Tune sees a direct trial's GPU share: trials wait as PENDING
        (True, True, 3, 3),  # the user's own cap
        (False, False, None, 0),  # the driver holds the workers' CPUs: Tune sees them
        (False, True, None, 2),  # Train's workers reserve the GPUs out of Tune's sight
    ],
)
def test_trials_are_capped_at_the_slots_only_where_tune_cannot_see_the_gpus(direct, use_gpu, user_cap, expected):
    from tuner.search.registry import build_searcher

    trials = {"max_concurrent": user_cap} if user_cap else {}
    scaling = {"runner": "direct"} if direct else {"workers": 2}
    sweep = SweepConfig.model_validate({"name": "r", "scaling": scaling, "trials": trials})
    assert build_searcher(sweep, 2, gpus_out_of_sight=use_gpu and not direct).max_concurrent == expected


# --- the spare cores lent to a sweep's last trials (tuner.driver.callbacks.SpareCores) ----------


@pytest.mark.parametrize(
    "running, own, spare, expected",
    [
        (["a"], 1, 1, {"a": 2}),  # the default sweep's lone last trial, on 2 cores
        (["a", "b"], 1, 3, {"a": 3, "b": 2}),  # the first take what does not share out
        (["a", "b"], 1, 1, {"a": 2}),
        (["a"], 2, 0, {}),  # nothing spare: each keeps its own (no file entry)
        ([], 1, 4, {}),
    ],
)
def test_spare_cores_are_shared_over_the_running_trials(running, own, spare, expected):
    from tuner.driver.callbacks import lend

    assert lend(running, own, spare) == expected


class _Trial:
    def __init__(self, trial_id: str, status: str):
        self.trial_id, self.status = trial_id, status


@pytest.mark.parametrize(
    "statuses, total",
    [
        (["RUNNING"], 2),  # a trial is still to come from the searcher
        (["RUNNING", "PENDING"], 2),  # one waits for a slot
        (["RUNNING", "PAUSED"], 2),  # HyperBand will resume one
        (["TERMINATED", "ERROR"], 2),  # none running
    ],
)
def test_no_cores_are_lent_while_a_trial_waits_or_is_still_to_come(tmp_path, statuses, total):
    """Decided before Ray is asked anything: these need no Ray."""
    from tuner.driver.callbacks import SpareCores
    from tuner.folder.store import SweepFolder

    trials = [_Trial(f"t{i}", status) for i, status in enumerate(statuses)]
    assert SpareCores(SweepFolder(tmp_path), total, 1).shares(trials) == {}


def test_a_killed_sweeps_lent_cores_are_taken_back_when_it_starts_again(tmp_path):
    """A sweep killed while its last trials were lent cores left the file; on the next
    (re)start no trial may read those shares before the driver has decided anew."""
    from tuner.driver.callbacks import SpareCores
    from tuner.folder.store import LENT_CORES_FILE, SweepFolder

    folder = SweepFolder(tmp_path)
    folder.tune.mkdir(parents=True)
    (folder.tune / LENT_CORES_FILE).write_text('{"t0": 2}')
    SpareCores(folder, 1, 1).setup(total_num_samples=1)
    assert not (folder.tune / LENT_CORES_FILE).exists()


def test_two_sweeps_on_one_machine_lend_its_spare_cores_once(tmp_path):
    """Each sweep's own Ray counts every core as its own: the machine's ledger says what the
    other live sweeps hold and lend, and a dead driver's entry no longer counts."""
    import subprocess
    import sys

    from tuner.driver import machine_cores

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with machine_cores.ledger(tmp_path) as ledger:
            machine_cores.record(ledger, other.pid, held=1, lent=1)  # a sweep whose last trial has both cores
            machine_cores.record(ledger, 999_999_999, held=2, lent=0)  # a driver killed without a word
            assert machine_cores.others_use(ledger, os.getpid()) == 2
            assert not (ledger / "999999999.json").exists()
            machine_cores.record(ledger, os.getpid(), held=1, lent=0)
            assert machine_cores.others_use(ledger, os.getpid()) == 2  # never counts itself
            assert machine_cores.others_use(ledger, other.pid) == 1
            machine_cores.record(ledger, os.getpid(), held=0, lent=0)  # ended: no entry
            assert sorted(p.name for p in ledger.glob("*.json")) == [f"{other.pid}.json"]
    finally:
        other.kill()
        other.wait()
    with machine_cores.ledger(tmp_path) as ledger:
        assert machine_cores.others_use(ledger, os.getpid()) == 0


@pytest.mark.parametrize(
    "scheduler, runner, trials_dir, own",
    [
        ("fifo", "direct", "/runs/it/tune", True),
        ("asha", "direct", "/runs/it/tune", True),
        ("median", "direct", "/runs/it/tune", True),
        ("hyperband", "direct", "/runs/it/tune", False),  # pauses trials: Tune saves and restores them
        ("pbt", "direct", "/runs/it/tune", False),  # clones one trial's checkpoint into another
        ("asha", "torch_trainer", "/runs/it/tune", False),  # Ray Train's checkpoints, relayed
        ("asha", "direct", None, False),  # a sweep at a storage URI: Tune's storage holds them
    ],
)
def test_trials_keep_their_own_checkpoints_only_where_no_scheduler_moves_them(scheduler, runner, trials_dir, own):
    space = {"params": {"lr": {"loguniform": [1e-4, 1e-1]}}}
    sweep = SweepConfig.model_validate(
        {"name": "r", "scheduler": {"name": scheduler}, "scaling": {"runner": runner}, "space": space}
    )
    assert TrialSetup.of(sweep, trials_dir=trials_dir).own_checkpoints is own


@pytest.mark.parametrize(
    "scheduler, runner, sends_at",
    [
        ("fifo", "direct", {4}),  # only the last: FIFO acts on no report
        ("asha", "direct", {1, 2, 4}),  # ASHA's rungs (grace 1, factor 2) and the last
        ("median", "direct", None),  # acts on every report
        ("hyperband", "direct", None),  # moves trials: Tune keeps their checkpoints, every epoch sent
        ("asha", "torch_trainer", None),
    ],
)
def test_a_trial_holds_back_only_epochs_its_scheduler_does_not_act_at(scheduler, runner, sends_at):
    space = {"params": {"lr": {"loguniform": [1e-4, 1e-1]}}}
    sweep = SweepConfig.model_validate(
        {
            "name": "r",
            "train": {"epochs": 4},
            "scheduler": {"name": scheduler, **({"reduction_factor": 2} if scheduler == "asha" else {})},
            "scaling": {"runner": runner},
            "space": space,
        }
    )
    assert TrialSetup.of(sweep, trials_dir="/runs/it/tune").sends_at == sends_at
