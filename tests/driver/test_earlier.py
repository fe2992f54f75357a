"""Sweeps that an earlier tuner started and a user interrupted: ``tuner resume`` goes on with
them, and an earlier export loads. tests/fixtures/made-by-0.1 was made by tuner 0.1 (commit
4495271, before the package layout): one synthetic trial of 12 epochs, Ctrl-C after its
first. tests/fixtures/made-with-spec was made by main at 2eddd77 (the ``tuner.spec`` package,
before tuner.search and tuner.sweepfile): ``interrupted`` is an Optuna (TPE) + HyperBand
sweep of 2 synthetic trials of 20 epochs, Ctrl-C after the first trial's third epoch;
``exported/best`` a CNN's export from a 1-epoch MNIST sweep."""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path

import pytest
from integration_helpers import tuner_cli

from tuner.driver import earlier
from tuner.folder.store import SweepFolder

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "made-by-0.1"


@pytest.fixture
def old_folder(tmp_path) -> Path:
    folder = tmp_path / "runs" / "made-by-0.1"
    shutil.copytree(FIXTURE, folder)
    return folder


def test_its_settings_read_with_todays_names_and_get_todays_callbacks(old_folder):
    with pytest.raises(ModuleNotFoundError) as plainly:
        pickle.loads((old_folder / "tune" / "tuner.pkl").read_bytes())
    assert earlier.made_by_earlier_tuner(plainly.value)
    folder = SweepFolder(old_folder)
    earlier.bring_forward(folder, ["today's callbacks"])
    state = pickle.load(io.BytesIO((old_folder / "tune" / "tuner.pkl").read_bytes()))  # no old names left
    assert state["_run_config"].callbacks == ["today's callbacks"]
    kept = old_folder / "tune" / "tuner.pkl.tuner-0.1"
    assert kept.read_bytes() == (FIXTURE / "tune" / "tuner.pkl").read_bytes()
    earlier.bring_forward(folder, ["again"])  # the original is kept once, not replaced by the rewrite
    assert kept.read_bytes() == (FIXTURE / "tune" / "tuner.pkl").read_bytes()


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_resume_finishes_it_with_every_epoch_recorded(old_folder, ray_tmp):
    done = tuner_cli("resume", str(old_folder), env={"RAY_TMPDIR": str(ray_tmp)}, timeout=500)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (history,) = (old_folder / "history").glob("*.jsonl")
    epochs = [json.loads(line)["training_iteration"] for line in history.read_text().splitlines()]
    assert epochs == list(range(1, 13))
    assert json.loads((old_folder / "best" / "metrics.json").read_text())["epoch"] == 12
    assert (old_folder / "tune" / "tuner.pkl.tuner-0.1").is_file()
    events = [e["event"] for e in map(json.loads, (old_folder / "timeline.jsonl").read_text().splitlines())]
    assert events.count("end") == 1  # today's records callback wrote the trial's end


@pytest.mark.parametrize(
    ("old", "now"),
    [
        ("tuner.hyperband HyperBand", "tuner.search.tune_hyperband HyperBand"),
        ("tuner.hyperband BohbHyperBand", "tuner.search.tune_hyperband BohbHyperBand"),
        ("tuner.config SweepConfig", "tuner.sweepfile.schema SweepConfig"),
        ("tuner.store SweepPaths", "tuner.folder.store SweepFolder"),
        ("tuner.spec.hyperband BohbHyperBand", "tuner.search.tune_hyperband BohbHyperBand"),
        ("tuner.spec.optuna_space SpaceOptunaSearch", "tuner.search.tune_optuna SpaceOptunaSearch"),
        ("tuner.spec.hyperopt_space FlatHyperOptSearch", "tuner.search.tune_hyperopt FlatHyperOptSearch"),
        ("tuner.spec.spaces ParamSpec", "tuner.search.spaces ParamSpec"),
        ("tuner.spec.yamlio LoadedYaml", "tuner.yamlio LoadedYaml"),
        ("tuner.spec.config SweepConfig", "tuner.sweepfile.schema SweepConfig"),
        ("tuner.spec.config AshaScheduler", "tuner.search.asha AshaScheduler"),
        ("tuner.spec.config OptunaSearcher", "tuner.search.optuna_searcher OptunaSearcher"),
        ("tuner.spec.config DataConfig", "tuner.data.config DataConfig"),
        ("tuner.spec.config CnnConfig", "tuner.sweepfile.sections CnnConfig"),
        ("tuner.spec.searchers Evaluated", "tuner.search.base Evaluated"),
    ],
)
def test_each_name_an_earlier_tuner_pickled_reads_as_todays(old, now):
    """What an earlier pickle may name besides the fixtures': its schedulers, searchers, the
    sweep file's sections, the folder."""
    import importlib

    module, name = now.split()
    pickled = f"c{old.replace(' ', chr(10))}\n.".encode()  # protocol 0: GLOBAL module name
    assert earlier._EarlierNames(io.BytesIO(pickled)).load() is getattr(importlib.import_module(module), name)


SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "made-with-spec"


@pytest.fixture
def spec_folder(tmp_path) -> Path:
    folder = tmp_path / "runs" / "made-by-2eddd77"
    shutil.copytree(SPEC / "interrupted", folder)
    return folder


def test_a_spec_layout_sweep_reads_with_todays_names_searcher_state_too(spec_folder):
    tune = spec_folder / "tune"
    (state_file,) = tune.glob("searcher-state-*.pkl")
    for pickled in (tune / "tuner.pkl", state_file):
        with pytest.raises(ModuleNotFoundError) as plainly:
            pickle.loads(pickled.read_bytes())
        assert earlier.made_by_earlier_tuner(plainly.value)
    original_state = state_file.read_bytes()
    earlier.bring_forward(SweepFolder(spec_folder), ["today's callbacks"])
    state = pickle.loads((tune / "tuner.pkl").read_bytes())
    assert state["_run_config"].callbacks == ["today's callbacks"]
    assert type(state["_tune_config"].scheduler).__module__ == "tuner.search.tune_hyperband"
    searcher_state = pickle.loads(state_file.read_bytes())  # Tune's searcher restores from it
    assert b"tuner.spec" not in state_file.read_bytes() and searcher_state
    assert (tune / f"{state_file.name}.tuner-spec").read_bytes() == original_state
    assert (tune / "tuner.pkl.tuner-spec").read_bytes() == (SPEC / "interrupted" / "tune" / "tuner.pkl").read_bytes()


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_spec_layout_sweep_resumes_to_its_end(spec_folder, ray_tmp):
    done = tuner_cli("resume", str(spec_folder), env={"RAY_TMPDIR": str(ray_tmp)}, timeout=500)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    histories = {
        path.stem: [json.loads(line)["training_iteration"] for line in path.read_text().splitlines()]
        for path in (spec_folder / "history").glob("*.jsonl")
    }
    assert len(histories) == 2  # the interrupted trial and the one HyperBand had not started
    first = histories.pop("f1943a3c")
    assert first[:3] == [1, 2, 3] and first == sorted(set(first))  # went on from epoch 3, nothing twice
    assert (spec_folder / "best" / "metrics.json").is_file()
    assert not Path("/tmp/fx").exists()  # where the fixture was made: the new trial wrote here, not there


def test_an_export_made_with_the_spec_layout_loads_and_predicts():
    from tuner.data.datasets import load_test_split
    from tuner.results.export import load_best

    model = load_best(SPEC / "exported" / "best")
    test = load_test_split("mnist", None, download=False)
    classes, _ = model.predict(test.images[:500])
    assert (classes == test.labels[:500]).mean() > 0.5  # a CNN trained 1 epoch on 2,000 images, not chance


def test_a_callback_pickled_before_the_folder_was_named_folder_comes_back_with_it(tmp_path):
    """A sweep that today's layout started but the tuner before issue 40 pickled: Tune's
    pickle gives back its callbacks with the sweep folder as ``paths``."""
    from tuner.driver.callbacks import SweepRecords
    from tuner.driver.stalls import StallWatch

    for callback in (
        SweepRecords(SweepFolder(tmp_path), 1, "val_accuracy", "max"),
        StallWatch(SweepFolder(tmp_path), 60),
    ):
        callback.paths = callback.__dict__.pop("folder")  # as that tuner's instances were
        restored = pickle.loads(pickle.dumps(callback))
        assert restored.folder == SweepFolder(tmp_path) and not hasattr(restored, "paths")
