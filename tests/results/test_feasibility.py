"""Feasibility where a user looks (issue 42): status's column, the report's table, facts and
best-so-far curve, ``best``'s one line when no trial meets the constraints. All of them ask
tuner/folder/constraints.py through the sweep."""

from __future__ import annotations

import pytest

from tuner.errors import NoFeasibleTrial
from tuner.folder import constraints as constraining
from tuner.folder import records
from tuner.folder.store import SweepFolder
from tuner.results import report, report_data
from tuner.results.summaries import TrialSummary, best_trial
from tuner.results.tables import trials_table
from tuner.sweepfile.schema import SweepConfig

ROWS = {  # val_accuracy per epoch with the model's parameter count, as tuner's loop reports them
    "t_00000": [(0.97, 600_000.0)],
    "t_00001": [(0.93, 150_000.0), (0.95, 150_000.0)],
    "t_00002": [(0.90, 70_000.0)],
}


def _sweep(tmp_path, constraints):
    config = SweepConfig.model_validate(
        {
            "name": "made_up",
            "output_dir": str(tmp_path),
            "train": {"epochs": 2},
            "space": {"params": {"hidden": {"choice": [64, 512]}}},
            "trials": {"num_samples": 3},
            "constraints": constraints,
        }
    )
    histories = {
        trial: [
            {"training_iteration": e + 1, "val_accuracy": v, "params": p, "reported_at": 1000.0 + 10 * (i + e)}
            for e, (v, p) in enumerate(rows)
        ]
        for i, (trial, rows) in enumerate(ROWS.items())
    }
    trials = [
        TrialSummary(
            trial_id=trial,
            status="finished",
            epochs=len(rows),
            config={"hidden": 512 if trial == "t_00000" else 64},
            best_epoch=len(rows),
            best_value=max(v for v, _ in rows),
            last=histories[trial][-1],
            violated=constraining.feasibility(config.parsed_constraints, histories[trial]).violated
            if config.constraints
            else None,
        )
        for trial, rows in ROWS.items()
    ]
    return config, trials, histories


def test_status_has_a_feasible_column_and_counts_the_trials_that_meet_the_constraints(tmp_path):
    config, trials, _ = _sweep(tmp_path, ["params < 200000"])
    lines = trials_table(config, trials)
    assert "feasible" in lines[1]
    assert lines[2].split()[:6] == ["t_00000", "finished", "1", "0.9700", "1", "NO"]
    assert lines[3].split()[5] == "yes" and lines[4].split()[5] == "yes"
    assert "  2 of 3 trial(s) that reported meet the constraints (params < 200000)" in lines
    plain, untouched, _ = _sweep(tmp_path, [])
    assert "feasible" not in trials_table(plain, untouched)[1]


def test_the_report_marks_infeasible_trials_and_its_best_is_the_feasible_best(tmp_path):
    config, trials, histories = _sweep(tmp_path, ["params < 200000"])
    sweep = report_data.Sweep(
        config=config,
        folder=SweepFolder(tmp_path / "made_up"),
        label="made_up",
        trials=trials,
        histories=histories,
        timeline=[],
        searched=config.param_specs(),
        finished=True,
        now=2000.0,
    )
    table = report._table(sweep)
    assert "<th>constraints</th>" in table
    assert "INFEASIBLE: params &lt; 200000 (got 600000)" in table and table.count(">met<") == 2
    assert "0.9500" in report._facts(sweep) and "0.9700" not in report._facts(sweep)
    # the best-so-far curve never rises to the infeasible trial's 0.97
    assert [point[2] for point in report_data.best_so_far(sweep)] == [0.93, 0.95, 0.95]


def test_best_says_in_one_line_that_no_trial_meets_the_constraints(tmp_path):
    folder = SweepFolder(tmp_path / "made_up")
    config, trials, histories = _sweep(tmp_path, ["params < 1000"])
    for trial, rows in histories.items():
        for row in rows:
            records.append_history(folder, trial, row)
    with pytest.raises(NoFeasibleTrial, match=r"no trial meets the constraints \(params < 1000\): all 3 that"):
        best_trial(config, folder, trials)
    met, met_trials, _ = _sweep(tmp_path, ["params < 200000"])
    assert best_trial(met, folder, met_trials).trial_id == "t_00001"
