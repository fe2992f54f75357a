"""The data a sweep's driver makes ready (tuner/driver/inputs.py): errors about them name
the sweep file and line, as validation's do. No Ray."""

from __future__ import annotations

import re

import pytest

from tuner.data import sources


def test_a_data_path_error_names_the_sweep_file_and_line_of_data_path_in_a_sweep_and_a_resume(tmp_path):
    """Raised where the data are listed, without a file; located by the sweep that plans
    them: in the sweep file, and in a resumed sweep's folder, in its sweep.yaml."""
    from tuner.driver.inputs import load_data
    from tuner.driver.sweep import save_resolved_config
    from tuner.errors import ConfigError
    from tuner.folder.store import SweepFolder
    from tuner.results.summaries import open_sweep
    from tuner.sweepfile.load import load_sweep

    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match=rf"^data\.path: {re.escape(str(missing))} is not a folder$"):
        sources.list_image_folder(str(missing))
    sweep_file = tmp_path / "mine.yaml"
    sweep_file.write_text(f"name: mine\ndata:\n  dataset: image_folder\n  path: {missing}\n  channels: 1\n")
    sweep = load_sweep(str(sweep_file), [f"output_dir={tmp_path / 'runs'}"])
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(sweep_file))}:4: data\.path: .*nowhere is not a folder$"):
        load_data(sweep)
    folder = SweepFolder(tmp_path / "runs" / "mine")
    folder.root.mkdir(parents=True)
    save_resolved_config(sweep, folder)
    line = 1 + [text.strip() for text in folder.config.read_text().splitlines()].index(f"path: {missing}")
    resumed, _ = open_sweep(folder.root)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(folder.config))}:{line}: data\.path: .*nowhere is not"):
        load_data(resumed)
