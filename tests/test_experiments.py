"""Every shipped experiment file runs (``--smoke`` sizes: 2000 images, 2 epochs, 2 trials)."""

from __future__ import annotations

import pytest
from conftest import require
from integration_helpers import assert_no_leaks, data_root

from tuner.config import EXPERIMENTS_DIR, load_sweep
from tuner.sweep import run_sweep

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

# ResNet-18 on a CPU core is ~100x the CNN's cost per image: fewer images keep it short.
EXTRA = {"fashion_resnet_asha": ["data.train_subset=500", "train.batch_size=64"]}


@pytest.mark.parametrize("path", sorted(EXPERIMENTS_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_experiment_runs_in_smoke_size(local_ray, tmp_path, path):
    overrides = [f"output_dir={tmp_path}", f"data.root={data_root()}", "data.download=false"]
    sweep = load_sweep(str(path), overrides + EXTRA.get(path.stem, []), smoke=True)
    if sweep.data.dataset == "fashion_mnist":
        require((data_root() / "FashionMNIST" / "raw").is_dir(), "Fashion-MNIST not in the data root")
    outcome = run_sweep(sweep)
    assert not outcome.results.errors, outcome.results.errors
    assert len(outcome.results) == sweep.trials.num_samples
    assert outcome.best["test_accuracy"] > 0.2, outcome.best  # chance is 0.1
    assert (outcome.paths.best / "model.pt").is_file()
    assert_no_leaks()
