"""Every shipped experiment file runs (``--smoke`` sizes: 2000 training and test images, 2 epochs, 2 trials)."""

from __future__ import annotations

import pytest
import yaml
from conftest import require
from integration_helpers import assert_no_leaks, data_root

from tuner.driver.sweep import run_sweep
from tuner.folder import records
from tuner.sweepfile.load import EXPERIMENTS_DIR, load_sweep

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

# ResNet-18 on a CPU core is ~100x the CNN's cost per image: fewer images keep it short.
# CIFAR-10 is not among the test data: its experiment (augmentation searched) runs here on
# Fashion-MNIST with the CNN (ResNet-18 already runs above, and its export's 10,000 test
# images alone take a CPU over a minute); the CIFAR-10 reader has its own test (test_data.py).
EXTRA = {
    "fashion_resnet_asha": ["data.train_subset=500", "data.test_subset=500", "train.batch_size=64"],
    "cifar10_resnet_asha": ["data.dataset=fashion_mnist", "model.name=cnn"],
    # ResNet-18 may be drawn
    "mnist_model_choice": ["data.train_subset=500", "data.test_subset=500", "train.batch_size=64"],
}
RAN: dict[str, object] = {}  # experiment -> its smoke run's folder (the warm start reads one)


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """A user's image folder (train/ and test/ of real MNIST digits as PNGs) for the
    folder experiment a user copies."""
    from PIL import Image

    from tuner.data.datasets import load_split, resolve_root

    root = tmp_path_factory.mktemp("my_images")
    for split, train, count in (("train", True, 2000), ("test", False, 500)):
        data = load_split("mnist", resolve_root(str(data_root())), train)
        for i in range(count):
            folder = root / split / str(data.labels[i])
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(data.images[i, 0]).save(folder / f"{i:05d}.png")
    return root


# Run elsewhere, as its README command runs it (a sweep twice, then predict):
# mnist_spark_asha in tests/data/test_spark.py. Constraints (issue 42) ride on a sweep that
# ran anyway (CI's time is spent): tests/trial/test_own_code.py's factory sweep has one
# (status's column, MLflow's tags, the feasible export); the Optuna half, told the values,
# is tests/search/test_constrained_search.py; mnist_constraints.yaml itself loads in test_config.py.
RUN_ELSEWHERE = {"mnist_spark_asha", "mnist_constraints"}
# Files that differ from one run above only in the searcher's algorithm (the same Optuna
# searcher or HyperOpt's, the same trial, tracking and export path: mnist_optuna_asha,
# mnist_multiobjective) run their searcher and scheduler in this process
# instead: built from the file as the sweep builds them, driven trial by trial as Tune
# drives them, every proposal checked against the space (CI's minutes, issue 42).
# mnist_conditional (Optuna's TPE on a conditional space, ASHA) and mnist_auto (what auto
# picks for the CNN's space) join them: their sweeps as such run on synthetic trials in
# tests/driver/test_search_sweeps.py, and ASHA on the CNN is mnist_asha's run above.
SEARCHED_IN_PROCESS = {
    "mnist_auto",
    "mnist_conditional",
    "mnist_optuna_cmaes",
    "mnist_optuna_gp",
    "mnist_optuna_qmc",
    "mnist_optuna_random",
    "mnist_nsga2",
    "mnist_conditional_hyperopt",
}


@pytest.mark.parametrize(
    "path",
    sorted(p for p in EXPERIMENTS_DIR.glob("*.yaml") if p.stem not in RUN_ELSEWHERE | SEARCHED_IN_PROCESS),
    ids=lambda p: p.stem,
)
def test_experiment_runs_in_smoke_size(local_ray, tmp_path, tmp_path_factory, monkeypatch, path, request, capsys):
    overrides = [f"output_dir={tmp_path}", f"data.root={data_root()}", "data.download=false"]
    if path.stem == "folder_cnn_asha":
        monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
        overrides = [f"output_dir={tmp_path}", f"data.path={request.getfixturevalue('image_folder')}"]
    if path.stem == "mnist_warm_start":  # told the trials of the sweep its file names, run first
        earlier = RAN.get("mnist_optuna_asha") or _smoke_run(EXPERIMENTS_DIR / "mnist_optuna_asha.yaml", tmp_path)
        overrides.append(f"searcher.warm_start={earlier}")
    sweep = load_sweep(str(path), overrides + EXTRA.get(path.stem, []), smoke=True)
    if sweep.data.dataset == "fashion_mnist":
        require((data_root() / "FashionMNIST" / "raw").is_dir(), "Fashion-MNIST not in the data root")
    capsys.readouterr()
    outcome = run_sweep(sweep)
    RAN[path.stem] = outcome.folder.root
    said = capsys.readouterr().out
    if path.stem == "mnist_warm_start":
        assert "  warm start: 2 trial(s) of " in said
    if sweep.picked:  # searcher: auto says what it picked, second line
        assert f"  {sweep.picked}" in said.splitlines()
    if sweep.objectives:  # every epoch reports every objective; the export says which rule chose it
        rows = [row for rows in records.trial_histories(outcome.folder).values() for row in rows]
        assert rows and all(row[o.metric] > 0 for row in rows for o in sweep.objectives)
        exported = yaml.safe_load((outcome.folder.best / "config.yaml").read_text())
        assert exported["metric"]["selected_by"].startswith(("knee", "max val_accuracy where params < 200000"))
    assert not outcome.results.errors, outcome.results.errors
    assert len(outcome.results) == sweep.trials.num_samples
    assert outcome.best["test_accuracy"] > 0.2, outcome.best  # chance is 0.1
    if sweep.data.dataset in ("mnist", "fashion_mnist"):  # scored on the first 2000 (or 500) of 10000 test images
        assert outcome.best["test_images"] == sweep.data.test_subset in (2000, 500), outcome.best
    assert (outcome.folder.best / "model.pt").is_file()
    assert_no_leaks()


def _smoke_run(path, tmp_path):
    output = tmp_path / "earlier"
    sweep = load_sweep(
        str(path), [f"output_dir={output}", f"data.root={data_root()}", "data.download=false"], smoke=True
    )
    return run_sweep(sweep).folder.root


SAMPLERS = {
    "cmaes": "CmaEsSampler",
    "gp": "GPSampler",
    "qmc": "QMCSampler",
    "random": "RandomSampler",
    "tpe": "TPESampler",
}


@pytest.mark.parametrize("stem", sorted(SEARCHED_IN_PROCESS))
def test_experiment_searches_in_process(stem):
    import random

    from tuner.search import registry, spaces

    sweep = load_sweep(str(EXPERIMENTS_DIR / f"{stem}.yaml"), [f"data.root={data_root()}"])
    if stem == "mnist_auto":  # what auto picked, and why, as the sweep says it first
        assert sweep.searcher.name == "optuna" and sweep.picked.startswith("auto picked searcher optuna"), sweep.picked
    specs = sweep.param_specs()
    search_alg = registry.build_searcher(sweep, 2)
    scheduler = registry.build_scheduler(sweep, search_alg)
    param_space = {} if sweep.searcher.holds_space(sweep) else spaces.to_param_space(specs)
    search_alg.set_search_properties(sweep.metric, sweep.mode, param_space)  # as Tune does
    scheduler.set_search_properties(sweep.metric, sweep.mode)
    metrics = [o.metric for o in sweep.objectives] or [sweep.metric]
    seen = set()
    for i in range(sweep.trials.num_samples):
        trial = f"t{i}"
        config = search_alg.suggest(trial)
        assert isinstance(config, dict), (stem, i, config)
        assert set(config) == set(_in_space(config, specs)), (stem, config)  # the branch taken's names only
        seen.add(tuple(sorted(config.items())))
        draw = random.Random(str(sorted(config.items())))
        for epoch in range(1, sweep.train.epochs + 1):
            result = {"training_iteration": epoch, **{m: draw.random() for m in metrics}}
            search_alg.on_trial_result(trial, result)
        search_alg.on_trial_complete(trial, result)
    assert len(seen) >= 4  # it searches, not repeats
    searcher = getattr(search_alg, "searcher", search_alg)
    study = getattr(searcher, "_ot_study", None)
    if sweep.searcher.name == "optuna":  # the file's sampler, told every trial
        assert type(study.sampler).__name__ == SAMPLERS.get(sweep.searcher.sampler, "NSGAIISampler")
        states = [t.state.name for t in study.trials]
        assert states == ["COMPLETE"] * sweep.trials.num_samples, states
        assert all(len(t.values) == len(metrics) for t in study.trials)
    else:  # HyperOpt: each branch's own parameters only, told every trial
        assert len(searcher._hpopt_trials.trials) == sweep.trials.num_samples


def _in_space(config, specs):
    """The names ``config`` must have under ``specs`` (a conditional choice: its taken
    branch's), each value asserted to be one the space can give."""
    names = []
    for name, spec in specs.items():
        value = config[name]
        names.append(name)
        if spec.kind == "branches":
            assert value in spec.branches, (name, value)
            names += _in_space(config, spec.branches[value])
        elif spec.kind in ("choice", "constant"):
            assert value in spec.args, (name, value)
        else:
            assert spec.args[0] <= value <= spec.args[1], (name, value)
    return names
