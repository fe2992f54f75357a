"""A sweep folder moved before its resume: the trials Tune's search algorithms make after the
resume write to the folder where it is now. Tune's own generators save their state in the
folder and restore from it, as in a resume; no Ray cluster is needed for that. The resume of
a real moved sweep with a trial still to make runs in test_earlier.py (the spec-layout fixture,
made in another folder)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray import tune
from ray.tune.experiment import Experiment
from ray.tune.search import BasicVariantGenerator, Searcher, SearchGenerator

from tuner.driver.moved import point_searcher_here
from tuner.folder.store import SweepFolder


class Counting(Searcher):
    """A model-based searcher's shape: Tune wraps it in a SearchGenerator, which makes each
    trial when it is asked for one."""

    def __init__(self) -> None:
        super().__init__(metric="val_accuracy", mode="max")
        self.made = 0

    def suggest(self, trial_id: str) -> dict:
        self.made += 1
        return {"lr": 0.1 * self.made}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        pass  # its model: none; the SearchGenerator's own state is what names the folder

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        pass


def _trainable(config: dict) -> None:
    pass


@pytest.fixture
def saved_then_moved(tmp_path) -> tuple[Path, Path]:
    """A sweep folder whose search algorithms saved their state with trials still to make,
    then moved; (where it was, where it is)."""
    first = tmp_path / "runs" / "first"
    (first / "tune").mkdir(parents=True)
    experiment = Experiment(
        "tune", run=_trainable, storage_path=str(first), num_samples=20, config={"momentum": tune.uniform(0, 1)}
    )
    searcher = SearchGenerator(Counting())
    searcher.add_configurations([experiment])
    searcher.next_trial()
    searcher.save_to_dir(str(first / "tune"), "2026-11-28_00-00-00")
    random = BasicVariantGenerator()  # random and grid search: trials past the pending ones come later
    random.add_configurations([experiment])
    random.next_trial()
    random.save_to_dir(str(first / "tune"), "2026-11-28_00-00-00")
    moved = tmp_path / "elsewhere" / "first"
    moved.parent.mkdir()
    first.rename(moved)
    return first, moved


def test_the_trials_made_after_the_move_are_in_the_folder_where_it_is(saved_then_moved):
    first, moved = saved_then_moved
    rewritten = point_searcher_here(SweepFolder(moved))
    saved = "2026-11-28_00-00-00.json"
    assert sorted(rewritten) == [f"basic-variant-state-{saved}", f"search_gen_state-{saved}"]
    for generator in (SearchGenerator(Counting()), BasicVariantGenerator()):
        generator.restore_from_dir(str(moved / "tune"))
        trial = generator.next_trial()
        assert trial.storage.storage_fs_path == str(moved), type(generator).__name__
    assert not first.exists()


def test_a_folder_where_it_was_saved_is_not_written(saved_then_moved):
    _, moved = saved_then_moved
    point_searcher_here(SweepFolder(moved))
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (moved / "tune").iterdir()}
    assert point_searcher_here(SweepFolder(moved)) == []  # the second resume: nothing to point here
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (moved / "tune").iterdir()} == before
