"""End to end on a real local Ray and real MNIST images: ASHA, export, DDP, PBT, leaks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from integration_helpers import assert_no_leaks, data_root, small_sweep

from tuner.driver.sweep import run_sweep
from tuner.folder.records import trial_histories
from tuner.sweepfile.schema import SweepConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def _trial_histories(outcome) -> dict[str, list[dict]]:
    """Every reported result of every trial, from the sweep's own history log."""
    return trial_histories(outcome.folder)


# The direct runner (the one a one-worker trial gets). A TorchTrainer trial's export and its
# Train run inside the sweep folder: the test after this one.
def test_asha_sweep_stops_trials_early_and_exports_a_model_that_loads_without_ray(local_ray, tmp_path):
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            scaling={"runner": "direct"},
            # Two learning rates that learn and two that cannot (1e-6): whichever order the
            # first epochs arrive in, ASHA's median cut must stop at least one trial.
            space={"params": {"lr": {"grid": [3e-3, 1e-6, 1e-6, 2e-3]}, "dropout": {"uniform": [0.0, 0.5]}}},
            scheduler={"name": "asha", "grace_period": 1, "reduction_factor": 2},
            trials={"num_samples": 1},
        )
    )
    outcome = run_sweep(sweep)

    histories = _trial_histories(outcome)
    assert len(histories) == 4
    assert not outcome.results.errors
    epochs_run = sorted(len(rows) for rows in histories.values())
    assert epochs_run[0] == 1, f"ASHA stopped no trial early: epochs per trial {epochs_run}"
    assert epochs_run[-1] == 2
    for rows in histories.values():  # every epoch reported all metrics, in order
        assert [row["epoch"] for row in rows] == list(range(1, len(rows) + 1))
        assert all(0.0 <= row["val_accuracy"] <= 1.0 and row["val_loss"] > 0 for row in rows)

    best = outcome.best
    all_scores = [row["val_accuracy"] for rows in histories.values() for row in rows]
    assert best["val_accuracy"] == pytest.approx(max(all_scores))
    assert best["test_accuracy"] > 0.5, "the exported model should be far above chance (0.1)"
    assert best["test_images"] == 10_000

    best_dir = outcome.folder.best
    assert sorted(p.name for p in best_dir.iterdir()) == ["config.yaml", "metrics.json", "model.pt"]
    assert json.loads((best_dir / "metrics.json").read_text())["trial_id"] == best["trial_id"]
    assert (outcome.folder.root / "sweep.yaml").is_file()
    assert list((outcome.folder.tune).glob("trial_driver_*/events.out.tfevents.*")), "TensorBoard files per trial"
    assert not [p for p in outcome.folder.train.glob("*") if p.is_dir()], "a direct trial made a Train run"

    script = (
        "import sys, numpy as np\n"
        "from tuner.results.export import load_best\n"
        "from tuner.data.datasets import load_test_split\n"
        f"exported = load_best({str(best_dir)!r})\n"
        f"test = load_test_split('mnist', {str(data_root())!r}, download=False)\n"
        "classes, confidence = exported.predict(test.images[:2000])\n"
        "accuracy = float((classes == test.labels[:2000]).mean())\n"
        "assert 'ray' not in sys.modules, 'load_best imported ray'\n"
        "assert ((confidence > 0) & (confidence <= 1)).all()\n"
        "print(accuracy)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip()) > 0.5
    assert_no_leaks()


def test_a_one_worker_trial_is_the_same_run_directly_or_as_a_torch_trainer(local_ray, tmp_path):
    # Same seed, same trial index, one thread: the two runners must train the same model.
    outcomes = {}
    for runner in ("direct", "torch_trainer"):
        sweep = SweepConfig.model_validate(
            small_sweep(
                tmp_path / runner,
                data={"train_subset": 1500},
                train={"epochs": 1},
                trials={"num_samples": 1},
                # A lone direct trial would be lent the other core (the next test): not the same sums.
                scaling={"runner": runner, "lend_spare_cores": False},
                tracking={"mlflow": {"enabled": False}},
            )
        )
        outcomes[runner] = run_sweep(sweep)
    direct, trainer = (_trial_histories(outcomes[r]) for r in ("direct", "torch_trainer"))
    (direct_rows,), (trainer_rows,) = direct.values(), trainer.values()
    assert len(direct_rows) == len(trainer_rows) == 1
    assert direct_rows[0]["threads"] == trainer_rows[0]["threads"] == 1
    for key in ("train_loss", "val_loss", "val_accuracy", "lr", "world_size"):
        assert direct_rows[0][key] == pytest.approx(trainer_rows[0][key], rel=1e-6), key
    assert outcomes["direct"].best["test_loss"] == pytest.approx(outcomes["torch_trainer"].best["test_loss"], rel=1e-6)
    # What the direct runner is for: the first step starts without a Train run's start-up.
    setup_s = {
        r: rows[0]["first_step_at"] - rows[0]["entered_at"]
        for r, rows in (("direct", direct_rows), ("torch_trainer", trainer_rows))
    }
    assert setup_s["direct"] < setup_s["torch_trainer"], setup_s
    # Everything inside the sweep folder: the TorchTrainer trial's Train run too; a direct one has none.
    train_runs = {r: [p for p in outcomes[r].folder.train.glob("*") if p.is_dir()] for r in outcomes}
    assert len(train_runs["torch_trainer"]) == 1 and not train_runs["direct"], train_runs
    assert_no_leaks()


def test_a_lone_last_trial_trains_on_the_cores_no_trial_holds(local_ray, tmp_path, monkeypatch):
    """One 1-CPU trial on a 2-CPU Ray, none to come: it is lent the idle core from its
    first epoch (the file is written before Tune starts its function), and the lending
    file is gone once the sweep ends."""
    from tuner.driver import machine_cores
    from tuner.folder.store import LENT_CORES_FILE

    # A ledger of its own: `make test`'s other worker runs sweeps on this machine meanwhile,
    # and a core they hold is rightly not lent (test_resources checks the ledger's rules).
    monkeypatch.setattr(machine_cores, "ledger_dir", lambda: tmp_path / "ledger")

    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            data={"train_subset": 1500},
            trials={"num_samples": 1},
            tracking={"mlflow": {"enabled": False}},
        )
    )
    outcome = run_sweep(sweep)
    (rows,) = _trial_histories(outcome).values()
    assert [row["threads"] for row in rows] == [2, 2]
    assert rows[-1]["val_accuracy"] > 0.3
    assert not (outcome.folder.tune / LENT_CORES_FILE).exists()


def test_two_worker_trial_runs_ddp(local_ray, tmp_path):
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            train={"epochs": 1},
            trials={"num_samples": 1},
            scaling={"workers": 2, "cpus_per_worker": 1},
        )
    )
    outcome = run_sweep(sweep)
    (rows,) = _trial_histories(outcome).values()
    assert rows[-1]["world_size"] == 2
    assert rows[-1]["val_accuracy"] > 0.3
    assert_no_leaks()


def _leave_worker_groups_behind(count: int) -> list:
    """What a Train run stopped while its workers were still being placed leaves: a token
    worker group (0.01 CPU) made by its controller actor, which then died. Ray keeps such a
    group for as long as the job (the sweep's driver) lives."""
    import ray
    from ray.util.placement_group import placement_group

    @ray.remote(num_cpus=0)
    class DyingController:
        def place_workers(self):
            group = placement_group([{"CPU": 0.01}])
            ray.get(group.ready())
            return group

    groups = []
    for _ in range(count):
        controller = DyingController.remote()
        groups.append(ray.get(controller.place_workers.remote()))
        ray.kill(controller)
    return groups


def test_worker_groups_dead_train_runs_left_are_removed_so_torch_trainer_trials_still_start(local_ray, tmp_path):
    """The Train hang under load: two trials' groups (0.99 CPU each) and two token groups
    left by dead Train runs fill the 2 CPUs, and neither trial's workers (0.01 each) could
    ever be placed: the sweep waited for good (here, until its time budget)."""
    import ray

    left = _leave_worker_groups_behind(2)
    assert ray.available_resources().get("CPU", 0) == pytest.approx(1.98)
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            data={"train_subset": 1000},
            train={"epochs": 1},
            space={"params": {"lr": {"grid": [3e-3, 2e-3]}}},
            trials={"num_samples": 1, "time_budget_s": 150},
            scaling={"runner": "torch_trainer"},
        )
    )
    outcome = run_sweep(sweep)
    histories = _trial_histories(outcome)
    assert len(histories) == 2 and all(rows and rows[-1]["epoch"] == 1 for rows in histories.values()), histories
    table = ray.util.placement_group_table()
    assert all(table[group.id.hex()]["state"] == "REMOVED" for group in left)
    assert_no_leaks()


# PBT's exploit and HyperBand's pause restore a trial from a checkpoint, the path a killed
# sweep's resume takes: TorchTrainer's side of it runs in test_lifecycle.py (resumed) and
# tests/data/test_own_data.py (a trial that raises), so these two run the direct runner
# only (they took 150 s more as TorchTrainers, for no path of their own).
def test_pbt_clones_a_donor_checkpoint_and_the_trial_loads_it(local_ray, tmp_path):
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            scaling={"runner": "direct"},
            data={"train_subset": 2000},
            # Enough epochs that the two trials report side by side: on a loaded machine the
            # second trial's first report came after the first trial's third, and with 4
            # epochs the first had ended before the second could exploit it.
            train={"epochs": 8},
            # One good and one hopeless learning rate: the bad trial must exploit the good one.
            space={"params": {"lr": {"grid": [3e-3, 1e-6]}}},
            scheduler={
                "name": "pbt",
                "perturbation_interval": 1,
                "quantile_fraction": 0.5,
                "resample_probability": 0.0,
                "mutations": {"lr": {"choice": [2e-3, 3e-3]}},
            },
            trials={"num_samples": 1},
        )
    )
    outcome = run_sweep(sweep)
    histories = _trial_histories(outcome)
    assert len(histories) == 2
    clones = [
        (trial_id, row)
        for trial_id, rows in histories.items()
        for row in rows
        if row["resumed_from"] and row["resumed_from"] != trial_id
    ]
    assert clones, f"no trial restored from another's checkpoint: {histories}"
    trial_id, row = clones[0]
    donor_rows = histories[row["resumed_from"]]
    # The clone continued the donor's epochs rather than starting from scratch.
    assert row["epoch"] > 1
    assert any(r["epoch"] == row["epoch"] - 1 for r in donor_rows)
    # The report marks the exploit on the clone's learning curve, naming the donor.
    from tuner.results import report_data

    shown = report_data.read(outcome.folder.root)
    assert (int(row["training_iteration"]), row["resumed_from"]) in report_data.exploits(shown, trial_id)
    assert_no_leaks()


def test_hyperband_pauses_and_resumes_trials_with_epoch_budgets_intact(local_ray, tmp_path):
    # max_t=3, reduction 3: Tune's first bracket runs 2 trials for 3 epochs, the second
    # starts 3 trials at 1 epoch and keeps the best. With 2 slots, trial 2 (the only
    # good learning rate of that bracket) starts first, so it is paused at epoch 1 and
    # must later resume from its own checkpoint to run epochs 2 and 3.
    sweep = SweepConfig.model_validate(
        small_sweep(
            tmp_path,
            data={"train_subset": 1500},
            train={"epochs": 3},
            scaling={"runner": "direct"},
            space={"params": {"lr": {"grid": [1e-3, 1e-3, 3e-3, 1e-6, 1e-6]}}},
            scheduler={"name": "hyperband", "reduction_factor": 3},
            trials={"num_samples": 1},
            checkpoint={"keep": 1},
        )
    )
    outcome = run_sweep(sweep)
    assert not outcome.results.errors
    histories = _trial_histories(outcome)
    assert len(histories) == 5
    for rows in histories.values():
        # Tune's iteration counter and the trial's own epoch agree across pauses.
        assert [row["training_iteration"] for row in rows] == [row["epoch"] for row in rows]
        assert [row["epoch"] for row in rows] == list(range(1, len(rows) + 1)), rows
    epochs_run = sorted(len(rows) for rows in histories.values())
    assert epochs_run == [1, 1, 3, 3, 3], f"budgets {epochs_run}"
    resumed = {
        trial_id: [row["epoch"] for row in rows if row["resumed_from"] == trial_id]
        for trial_id, rows in histories.items()
    }
    paused_and_resumed = [epochs for epochs in resumed.values() if epochs]
    assert paused_and_resumed == [[2, 3]], f"resumed epochs per trial: {resumed}"

    # checkpoint.keep bounds the disk: the best one plus the latest per trial in tune/,
    # the last two of each TorchTrainer start in train/, though trials ran 3 epochs.
    def checkpoints(folder: Path) -> list[Path]:
        return [p for p in folder.glob("checkpoint_*") if p.is_dir()]

    for trial_dir in outcome.folder.tune.glob("trial_driver_*"):
        assert 1 <= len(checkpoints(trial_dir)) <= 2, sorted(p.name for p in trial_dir.iterdir())
    for run_dir in outcome.folder.train.glob("*"):
        if run_dir.is_dir():
            assert len(checkpoints(run_dir)) <= 2, sorted(p.name for p in run_dir.iterdir())
    # ... and the best epoch's checkpoint is one of those kept: the export found it.
    assert outcome.best["val_accuracy"] == pytest.approx(
        max(row["val_accuracy"] for rows in histories.values() for row in rows)
    )
    assert_no_leaks()


def test_trials_map_the_nodes_one_copy_of_the_data(local_ray):
    # Each trial reads the data set from Ray's object store: the arrays it gets are
    # read-only views of the node's one copy, and its tensors share their memory.
    import numpy as np
    import torch

    from tuner.data.datasets import Split, TrainingData
    from tuner.trial.loop import InMemoryData

    split = Split(np.zeros((2000, 1, 28, 28), dtype=np.uint8), np.zeros(2000, dtype=np.int64))
    data = TrainingData("mnist", split, split, (0.1,), (0.3,), 10, 1, 28)
    ref = local_ray.put(data)

    @local_ray.remote(num_cpus=0)
    def shared_in_trial(refs) -> tuple[bool, bool]:
        held = local_ray.get(refs[0])
        shards = InMemoryData(held, torch.device("cpu"), 0, 1)
        same_memory = shards.train_x.data_ptr() == held.train.images.ctypes.data
        return held.train.images.flags.writeable, same_memory

    writeable, same_memory = local_ray.get(shared_in_trial.remote([ref]))
    assert not writeable, "the trial got a private copy, not the object store's buffer"
    assert same_memory, "InMemoryData copied the images instead of viewing them"
