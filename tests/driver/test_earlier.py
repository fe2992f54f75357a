"""A sweep that tuner 0.1 started (before the package layout) and a user interrupted:
``tuner resume`` goes on with it. The folder in tests/fixtures/made-by-0.1 was made by
tuner 0.1 (commit 4495271): one synthetic trial of 12 epochs, Ctrl-C after its first."""

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
    assert earlier.made_by_tuner_0_1(plainly.value)
    paths = SweepFolder(old_folder)
    earlier.bring_forward(paths, ["today's callbacks"])
    state = pickle.load(io.BytesIO((old_folder / "tune" / "tuner.pkl").read_bytes()))  # no old names left
    assert state["_run_config"].callbacks == ["today's callbacks"]
    kept = old_folder / "tune" / "tuner.pkl.tuner-0.1"
    assert kept.read_bytes() == (FIXTURE / "tune" / "tuner.pkl").read_bytes()
    earlier.bring_forward(paths, ["again"])  # the original is kept once, not replaced by the rewrite
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
        ("tuner.hyperband HyperBand", "tuner.spec.hyperband HyperBand"),
        ("tuner.hyperband BohbHyperBand", "tuner.spec.hyperband BohbHyperBand"),
        ("tuner.config SweepConfig", "tuner.spec.config SweepConfig"),
        ("tuner.store SweepPaths", "tuner.folder.store SweepFolder"),
    ],
)
def test_each_name_tuner_0_1_pickled_reads_as_todays(old, now):
    """What a 0.1 pickle may name besides the fixture's: its schedulers, config, folder."""
    import importlib

    module, name = now.split()
    pickled = f"c{old.replace(' ', chr(10))}\n.".encode()  # protocol 0: GLOBAL module name
    assert earlier._EarlierNames(io.BytesIO(pickled)).load() is getattr(importlib.import_module(module), name)
