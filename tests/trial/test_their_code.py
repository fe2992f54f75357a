"""Code users already have, run unchanged (issue 41): an Optuna objective, a Ray Tune
function trainable, and both given as functions defined in a script's ``__main__`` (as in a
notebook). Each runs through real sweeps (``python -m tuner`` or ``tuner.run`` in a
subprocess, a local Ray of its own), from a folder tuner never saw, and is checked as a
user checks it: the history, the Optuna study, MLflow's runs through MLflow's client,
TensorBoard's HParams through TensorBoard's reader, ``status``, the export."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from integration_helpers import (
    data_root,
    mlflow_trial_runs,
    start_sweep,
    tensorboard_hparams,
    tuner_cli,
    wait_for_results,
)

from tuner.folder.records import trial_histories
from tuner.folder.store import SweepFolder

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900), pytest.mark.usefixtures("warm_ray")]

STUDY = """
import optuna


def objective(trial):
    x = trial.suggest_float("x", 0, 10) if trial.number == 4 else trial.suggest_float("x", -4, 4)  # 4: another range
    if trial.suggest_categorical("kind", ["quad", "abs"]) == "quad":  # a conditional space
        scale = trial.suggest_float("scale", 0.5, 2.0, log=True)
    else:
        scale = trial.suggest_int("steps", 1, 3)
    trial.set_user_attr("seen_number", trial.number)
    if trial.number == 2:
        raise RuntimeError("broken on purpose")
    if trial.number == 3:
        return float("nan")
    value = 0.0
    for step in range(3):
        value = (x - 1) ** 2 * scale + 1.0 / (step + 1) + (100 if trial.number == 5 else 0)
        trial.report(value, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    with open("written.txt", "w") as out:  # relative: the trial's own folder
        out.write(str(trial.number))
    return value
"""

TUNE_TRAIN = """
import json
import os
import tempfile

from ray import tune
from ray.tune import Checkpoint, report  # imported by name too, as users do


def train_fn(config):
    start, total = 0, 0.0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            saved = json.load(open(os.path.join(folder, "state.json")))
        start, total = saved["epoch"], saved["total"]
    trial_dir = tune.get_context().get_trial_dir()
    with open("starts.txt", "a") as starts:  # relative: the trial's own folder
        starts.write(f"{start}\\n")
    for epoch in range(start, 3):
        total += config["x"]
        if epoch == 1 and not os.path.exists(os.path.join(trial_dir, "failed")):
            open(os.path.join(trial_dir, "failed"), "w").write("once")
            raise RuntimeError("failing once, as asked")
        with tempfile.TemporaryDirectory() as folder:
            json.dump({"epoch": epoch + 1, "total": total}, open(os.path.join(folder, "state.json"), "w"))
            report({"score": total, "step": epoch}, checkpoint=Checkpoint.from_directory(folder))
"""


SLOW_STUDY = """
import time


def objective(trial):
    x = trial.suggest_float("x", -4, 4)
    for step in range(3):
        time.sleep(1.0)
        trial.report((x - 1) ** 2 + 1.0 / (step + 1), step)
    return (x - 1) ** 2
"""


def _project(tmp_path: Path) -> Path:
    folder = tmp_path / "their_project"
    folder.mkdir()
    (folder / "study.py").write_text(STUDY)
    (folder / "slow_study.py").write_text(SLOW_STUDY)
    (folder / "tune_train.py").write_text(TUNE_TRAIN)
    return folder


def _write(folder: Path, name: str, sweep: dict) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **sweep}, sort_keys=False))
    return path


def _env(ray_tmp: Path) -> dict[str, str]:
    return {"RAY_TMPDIR": str(ray_tmp), "TUNER_DATA_DIR": str(data_root())}


def _mlflow_params(root: Path) -> dict[str, tuple[dict[str, str], str]]:
    """Trial id -> (its MLflow params, its tuner.status), from the sweep's nested runs."""
    return {trial: (params, status) for trial, (params, _, status) in mlflow_trial_runs(root).items()}


def _hparams(root: Path) -> list[set[str]]:
    """Per trial that reported: the hyperparameters in its TensorBoard HParams."""
    return [hparams for hparams, _ in tensorboard_hparams(root)]


def test_an_optuna_objective_runs_unchanged_with_its_study_pruner_and_every_record(tmp_path, ray_tmp):
    code = _project(tmp_path)
    sweep_file = _write(
        code,
        "study",
        {
            "output_dir": str(tmp_path / "runs"),
            "objective": "study:objective",
            "mode": "min",
            "searcher": {"name": "optuna", "sampler": "tpe", "n_startup_trials": 10},
            "scheduler": {"name": "pruner", "pruner": "median", "n_startup_trials": 2},
            "trials": {"num_samples": 6, "max_concurrent": 1},  # in order: trial numbers are the test's plan
        },
    )
    done = tuner_cli("sweep", str(sweep_file), env=_env(ray_tmp))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "of objective study:objective" in done.stdout
    root = tmp_path / "runs" / "study"

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(
        study_name="study", storage=JournalStorage(JournalFileBackend(str(root / "study.journal")))
    )
    by_number = {t.number: t for t in study.trials}
    tune_id = {n: t.system_attrs["tuner.trial_id"] for n, t in by_number.items()}
    states = {n: t.state.name for n, t in by_number.items()}
    assert states == {0: "COMPLETE", 1: "COMPLETE", 2: "FAIL", 3: "FAIL", 4: "FAIL", 5: "PRUNED"}, states
    assert by_number[0].user_attrs == {"seen_number": 0}
    assert sorted(by_number[0].intermediate_values) == [0, 1, 2]
    assert list(by_number[5].intermediate_values) == [0]  # the median pruner stopped it at its first step

    status = tuner_cli("status", str(root))
    lines = status.stdout
    assert re.search(rf"{tune_id[0]}\s+finished\s+4\b", lines), lines  # 3 reports and the returned value
    assert re.search(rf"{tune_id[5]}\s+stopped_early\s+1\b", lines), lines
    assert f"{tune_id[2]} errored: RuntimeError: broken on purpose" in lines, lines
    assert f"{tune_id[3]} errored: objective 'study:objective' returned nan: an objective returns a number" in lines
    assert re.search(
        rf"{tune_id[4]} errored: objective: trial {tune_id[4]} suggests 'x' as float in \[0\.0, 10\.0\], but trial "
        rf"{tune_id[0]} suggested it as float in \[-4\.0, 4\.0\]; give a parameter one range in a sweep",
        lines,
    ), lines
    # every suggested value is the trial's parameter: status, MLflow, TensorBoard, best
    params = _mlflow_params(root)
    for number, trial in by_number.items():
        logged, _ = params[tune_id[number]]
        assert {k: float(v) if k != "kind" else v for k, v in logged.items()} == pytest.approx(
            {k: v for k, v in trial.params.items()}
        ), (number, logged, trial.params)
    assert params[tune_id[0]][1] == "finished" and params[tune_id[2]][1] == "errored"
    assert params[tune_id[5]][1] == "stopped_early"
    assert re.search(rf"{tune_id[0]}\s+finished.*x=.*kind=", lines), lines
    hparams = _hparams(root)
    spaces = {frozenset({"x", "kind", "scale"}), frozenset({"x", "kind", "steps"})}
    assert {frozenset(h) for h in hparams} <= spaces and len(hparams) == 3  # 0, 1 and 5 reported
    best = json.loads((root / "best" / "metrics.json").read_text())
    config = yaml.safe_load((root / "best" / "config.yaml").read_text())
    chosen = min((n for n in (0, 1)), key=lambda n: by_number[n].value)
    assert best["trial_id"] == tune_id[chosen] and best["value"] == pytest.approx(by_number[chosen].value)
    assert (
        config["hyperparameters"] == pytest.approx(by_number[chosen].params)
        and config["objective"] == "study:objective"
    )
    # the objective's relative write landed in its own trial folder, not in the code snapshot
    written = sorted(p.read_text() for p in (root / "tune").glob("*/written.txt"))
    assert (
        written == ["0", "1"] and not (code / "written.txt").exists() and not (root / "code" / "written.txt").exists()
    )


def test_an_interrupted_objective_sweep_resumes_with_its_study(tmp_path, ray_tmp):
    """Ctrl-C during the second trial, then ``tuner resume``: the study goes on from the
    journal, the interrupted trial is given its values again, and the resumed sampler does
    not draw the first run's values again."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    code = _project(tmp_path)
    sweep_file = _write(
        code,
        "slow",
        {
            "output_dir": str(tmp_path / "runs"),
            "objective": "slow_study:objective",
            "mode": "min",
            "searcher": {"name": "optuna", "sampler": "tpe"},
            "trials": {"num_samples": 4, "max_concurrent": 1},
            "tracking": {"mlflow": {"registry": False}},
        },
    )
    root = tmp_path / "runs" / "slow"
    sweep = start_sweep(sweep_file, env=_env(ray_tmp))
    wait_for_results(root, 5, sweep)  # the first trial's 4 reports, one of the second's
    os.killpg(sweep.pid, signal.SIGINT)
    out, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, out[-2000:] + err[-2000:]
    resumed = tuner_cli("resume", str(root), env=_env(ray_tmp))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    journal = JournalStorage(JournalFileBackend(str(root / "study.journal")))
    study = optuna.load_study(study_name="slow", storage=journal)
    by_tune: dict[str, list] = {}
    for trial in study.trials:
        by_tune.setdefault(trial.system_attrs["tuner.trial_id"], []).append(trial)
    assert len(by_tune) == 4 and all(tries[-1].state.name == "COMPLETE" for tries in by_tune.values()), study.trials
    second = next(tries for tries in by_tune.values() if len(tries) > 1)  # interrupted, asked again
    assert [t.state.name for t in second] == ["FAIL", "COMPLETE"] and second[0].params == second[1].params
    values = [tries[-1].params["x"] for tries in by_tune.values()]
    assert len(set(values)) == 4, values  # no first-run draw again
    histories = trial_histories(SweepFolder(root))
    assert sorted(len(rows) for rows in histories.values()) == [4, 4, 4, 4]
    params = _mlflow_params(root)
    assert sorted(float(p["x"]) for p, _ in params.values()) == pytest.approx(sorted(values))


def test_a_ray_tune_function_runs_unchanged_retried_from_its_checkpoint(tmp_path, ray_tmp):
    code = _project(tmp_path)
    sweep_file = _write(
        code,
        "tuned",
        {
            "output_dir": str(tmp_path / "runs"),
            "trainable": "tune_train:train_fn",
            "metric": "score",
            "mode": "max",
            "train": {"epochs": 3},
            "space": {"params": {"x": {"grid": [0.5, 1.0]}}},
            "trials": {"num_samples": 1, "max_failures": 1},
        },
    )
    done = tuner_cli("sweep", str(sweep_file), env=_env(ray_tmp))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "retrying from its last checkpoint (1 of 1)" in done.stdout, done.stdout
    root = tmp_path / "runs" / "tuned"
    histories = trial_histories(SweepFolder(root))
    assert sorted([row["epoch"] for row in rows] for rows in histories.values()) == [[1, 2, 3]] * 2
    assert sorted(round(rows[-1]["score"], 3) for rows in histories.values()) == [1.5, 3.0]  # state carried over
    # tune.get_checkpoint() gave the retry its epoch-1 checkpoint; get_trial_dir() and the
    # relative writes are the trial's own folder in the sweep
    for folder in (root / "tune").glob("trial_driver_*"):
        assert (folder / "starts.txt").read_text().split() == ["0", "1"] and (folder / "failed").is_file()
    assert not (code / "starts.txt").exists()
    params = _mlflow_params(root)
    assert sorted(p["x"] for p, _ in params.values()) == ["0.5", "1.0"]
    assert {status for _, status in params.values()} == {"finished"}
    assert set(map(frozenset, _hparams(root))) == {frozenset({"x"})}
    best = json.loads((root / "best" / "metrics.json").read_text())
    assert best["score"] == pytest.approx(3.0) and best["epoch"] == 3
    saved = json.loads((root / "best" / "checkpoint" / "state.json").read_text())
    assert saved == {"epoch": 3, "total": 3.0}  # the checkpoint the function reported, exported


def test_functions_of_a_notebook_run_by_value_and_resume_only_where_they_are(tmp_path, ray_tmp):
    """A script's ``__main__`` functions, as a notebook's: tuner.run takes the objects (no
    module to import them from on the trials' side), and a resume that lacks them is one line."""
    folder = tmp_path / "notebook"
    folder.mkdir()
    script = textwrap.dedent(f"""
        import json
        import tuner
        from ray import tune


        def train_fn(config):
            for step in range(2):
                tune.report({{"score": config["x"] * (step + 1)}})


        def objective(trial):
            return (trial.suggest_float("x", -2, 2) - 1) ** 2


        common = {{"output_dir": {str(tmp_path / "runs")!r}, "tracking": {{"mlflow": {{"registry": False}}}}}}
        trained = tuner.run({{"name": "cells", "metric": "score", "mode": "max", "train": {{"epochs": 2}},
                             "space": {{"params": {{"x": {{"grid": [0.25, 0.5]}}}}}}, "trials": {{"num_samples": 1}},
                             **common}}, trainable=train_fn)
        studied = tuner.run({{"name": "asked", "mode": "min", "trials": {{"num_samples": 3}}, **common}},
                            objective=objective)
        print(json.dumps({{"trained": sorted(trained.trials["best_score"].tolist()),
                          "studied": sorted(studied.trials["status"].tolist()),
                          "x": sorted(studied.trials["x"].round(4).tolist()),
                          "best": studied.best["value"]}}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=folder, timeout=600,
        env={**os.environ, **_env(ray_tmp)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["trained"] == [0.5, 1.0] and seen["studied"] == ["finished"] * 3
    assert seen["best"] == pytest.approx(min((x - 1) ** 2 for x in seen["x"]), abs=1e-3)
    assert yaml.safe_load((tmp_path / "runs" / "cells" / "sweep.yaml").read_text())["trainable"] == "__main__:train_fn"
    # a resume from the CLI has no notebook to take train_fn from: one line, before Ray starts
    from tuner.driver.own_code import check_importable
    from tuner.errors import TunerError
    from tuner.results.summaries import open_sweep

    sweep, _ = open_sweep(tmp_path / "runs" / "cells")
    with pytest.raises(
        TunerError,
        match=r"^trainable: '__main__:train_fn' was a function of a notebook \(or script\) "
        r"given to tuner.run; run it from there again: tuner.resume\(folder, trainable=train_fn\)$",
    ):
        check_importable(sweep)
