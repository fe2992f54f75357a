"""The published-benchmarks study (benchmarks/studies/published_search.py, issue 42): its
simulated sequential Tune loop drives tuner's own searcher and scheduler objects, as tuner
builds them from a sweep, on a pure-Python problem (no Ray cluster, no extra packages), and
charges the budget it is given. The published contestants' packages live in another venv
(.venv-search) and are not needed here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

STUDIES = Path(__file__).resolve().parents[1] / "benchmarks" / "studies"
sys.path.insert(0, str(STUDIES))

import published_search as study  # noqa: E402
from published_problems import PROBLEMS  # noqa: E402

TOY = PROBLEMS["toy-branin"]  # Branin, 2 parameters, 9 epochs, N = 12 trials


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return study.Env(out=tmp_path_factory.mktemp("published"), code_dir=study.stub_code_dir(), hebo_python=None)


def contestant(name: str) -> study.Contestant:
    return next(c for c in study.CONTESTANTS if c.name == name)


def trial_lengths(run: study.Run) -> dict[int, list[int]]:
    epochs: dict[int, list[int]] = {}
    for trial, epoch, _, _ in run.reports:
        epochs.setdefault(trial, []).append(epoch)
    return epochs


def test_random_asha_spends_exactly_the_epoch_budget_and_stops_trials_at_ashas_rungs(env):
    run = study.one_run(TOY, contestant("tuner random+asha"), 0, "epochs", env)

    assert run.status == "ok"
    assert run.epochs == len(run.reports) == TOY.epoch_budget == 108
    lengths = trial_lengths(run)
    assert len(lengths) == run.trials > TOY.trials  # stopped trials leave room for more than N
    for trial, epochs in lengths.items():
        assert epochs == list(range(1, len(epochs) + 1)), trial  # every epoch trained once, in order
    finished = [len(e) for t, e in lengths.items() if t < run.trials - 1]  # the last one is cut by the budget
    # tuner's asha (grace 1, reduction factor 2, max_t 9): a trial ends at a rung (1, 2, 4, 8) or at 9 epochs
    assert set(finished) <= {1, 2, 4, 8, 9}
    assert any(n < TOY.max_epochs for n in finished)  # the scheduler was consulted and stopped some
    assert all(r >= 0 for r in run.regret)
    # the best *reported* value so far never rises (the regret, the truth of that config, may:
    # a noisy report can mislead, as in search_quality.py; on this seed it does not)
    best_reported = [min(r[2] for r in run.reports[: i + 1]) for i in range(len(run.reports))]
    assert all(b <= a for a, b in zip(best_reported, best_reported[1:], strict=False))
    assert all(b <= a for a, b in zip(run.regret, run.regret[1:], strict=False))
    # the regret is the truth of the best-reported config, minus the optimum
    best = min(run.reports, key=lambda r: r[2])
    assert run.regret[-1] == pytest.approx(best[3] - TOY.optimum)


def test_random_asha_on_the_trials_budget_starts_exactly_n_trials(env):
    run = study.one_run(TOY, contestant("tuner random+asha"), 1, "trials", env)

    assert run.status == "ok"
    assert run.trials == len(trial_lengths(run)) == TOY.trials
    assert run.epochs < TOY.epoch_budget  # ASHA stopped some of the N early


def test_auto_picks_from_the_sweep_as_written_and_a_full_length_pick_runs_once_for_both_budgets(env):
    auto = contestant("tuner auto")
    sweep, picked = study.tuner_pick(TOY, auto, 0, env)

    assert "optuna (gp)" in picked and sweep.scheduler.name == "fifo"  # 2 numeric parameters, 12 trials
    assert study.modes(TOY, auto, 0, env) == ["both"]
    assert study.modes(TOY, contestant("tuner tpe+asha"), 0, env) == ["trials", "epochs"]


def test_the_table_bolds_the_lowest_median_and_counts_wins():
    runs = []
    for name, finals in (("tuner random+asha", [1.0, 2.0, 3.0]), ("tuner tpe+asha", [0.5, 0.5, 4.0])):
        for seed, value in enumerate(finals):
            runs.append(
                {
                    "problem": TOY.name,
                    "contestant": name,
                    "seed": seed,
                    "mode": "epochs",
                    "status": "ok",
                    # one report at the budget's last epoch whose truth gives this regret
                    "reports": [[0, 1, 0.0, value + TOY.optimum]],
                }
            )
    text = study.table(runs, [TOY], "epochs", "t")

    assert "| problem | tuner tpe+asha | tuner random+asha |" in text  # CONTESTANTS' order
    assert "| toy-branin | **0.5 [0.5, 2.25] (0.5-4)** | 2 [1.5, 2.5] (1-3) |" in text
    assert "| **wins** | 1 | 0 |" in text


def test_pest_control_is_a_function_whose_best_plan_has_no_regret(env):
    """COMBO's pest control, the evidence behind auto's rule for spaces of choices only: the
    same plan costs the same every time, and a run that meets the enumerated best plan has
    regret 0 (the GP contestant at 50 trials, 5 stages of 5 actions)."""
    pest = PROBLEMS["pest-5"]
    plan = {p.name: 2 for p in pest.params}
    assert pest.evaluate(plan, 1, 0) == pest.evaluate(plan, 1, 7)  # reported == true, any seed
    assert pest.evaluate(plan, 1, 0)[0] > pest.optimum > 0
    run = study.one_run(pest, contestant("tuner gp"), 0, "trials", env)
    assert run.status == "ok" and run.trials == pest.trials == 50
    assert run.regret[-1] == pytest.approx(0.0) and run.regret[0] > 0
