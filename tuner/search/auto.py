"""``searcher: auto``: a searcher, and a scheduler unless the file names one, picked from
the space, the budget and the epochs; the reason is printed when the sweep starts.

The rules, and what benchmarks/studies/search_quality.py measured of them (benchmarks/README.md):

- an objective's own space (``objective:``, define-by-run): Optuna's TPE, as in an Optuna
  study (the scheduler is the file's);
- a scheduler named in the file that needs a searcher of its own: BOHB's searcher with
  the bohb scheduler, random search with pbt or pb2 (they explore by themselves);
- several objectives: random search when the space has grid values, else Optuna's TPE in
  its multi-objective mode, and FIFO (no scheduler compares several objectives; NSGA-II
  needs generations of trials to beat random). On ZDT1 it had the lowest hypervolume gap
  of the contestants.
- grid values in the space: the variant generator, the only searcher that expands them;
- a conditional space: Optuna's TPE, which samples it define-by-run;
- only numeric parameters, at most 8 of them, at most 256 trials, and no scheduler named
  in the file: Optuna's Gaussian process with FIFO. Under a time budget
  (``trials.time_budget_s``) the GP only where the budget gives each trial of the cap at
  least 10 s (its proposals are made in Tune's loop, a tenth of a second or more each),
  and with more than 256 trials TPE proposes from trial 256 on; a shorter budget per
  trial gets TPE. On Branin and Hartmann-6 a GP over full-length trials had 2x and 10x
  less regret than TPE or random search with ASHA at the same epochs (early stopping's
  partial values mislead a model of the function, and curves that cross make its first
  rungs noisy);
- only choices (no numeric parameter), at most 8 of them, at most 256 trials, and no
  scheduler named: Optuna's Gaussian process with FIFO, as for numeric ones. On COMBO's
  pest-control problem (5 to 7 stages of 5 actions, benchmarks/studies/published_problems.py)
  the GP's median regret at 50 trials was far below TPE's (benchmarks/README.md); a space
  mixing choices and numbers has no such evidence yet and stays with TPE;
- otherwise: Optuna's TPE, robust to noise, categories and early-stopped trials.
- scheduler, if the file names none (and the GP did not take FIFO): ASHA (grace 1 epoch,
  reduction factor 3) when there are at least 8 trials of at least 3 epochs, so that
  stopping the worst pays; else FIFO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from tuner.search.base import Searcher
from tuner.search.spaces import RANGE_KINDS, ParamSpec

GP_MAX_DIMENSIONS = 8
GP_MAX_TRIALS = 256  # a GP's fit grows with the cube of the trials it has seen
# Under a time budget, the GP only where the budget gives each trial of the cap this many
# seconds: its proposals are made in Tune's loop, 0.1-0.15 s each on idle cores at up to 40
# trials and more beside busy trials, which a 12 s budget of 480 trials cannot pay: there a
# GP sweep of 0.45 s trials ran 16-21 trials against TPE's 45-79 and had more regret in 7 of
# 8 runs (benchmarks/README.md, search quality at equal wall time). With greenlet (Optuna
# optimises the acquisition from its starts at once) a proposal in a sweep's driver takes
# 0.1-0.2 s at 6-21 trials, and such a sweep ran 24-28 trials: still fewer than TPE's 55-78
# with ASHA, with less regret on Branin and more on Hartmann-6 (3 seeds, 2026-12-02)
GP_MIN_TRIAL_S = 10.0
ASHA_MIN_TRIALS = 8
ASHA_MIN_EPOCHS = 3


@dataclass(frozen=True)
class Choice:
    searcher: dict[str, Any]
    scheduler: dict[str, Any] | None  # None: the file's own
    reason: str


def pick(
    specs: dict[str, ParamSpec],
    *,
    trials: int,
    epochs: int,
    scheduler_given: bool,
    objectives: int = 0,
    own_searcher: tuple[dict[str, Any], str] | None = None,
    define_by_run: bool = False,
    time_budget_s: float | None = None,
) -> Choice:
    """``own_searcher``: the searcher the file's scheduler needs, and why (``Scheduler.own_searcher``);
    ``define_by_run``: the space is an objective's own ``trial.suggest_*`` calls; ``time_budget_s``:
    the sweep's, which may end it long before ``trials``."""
    searched = {name: spec for name, spec in specs.items() if spec.kind != "constant"}
    kinds = {spec.kind for spec in searched.values()}
    if define_by_run:
        return Choice(
            {"name": "optuna", "sampler": "tpe"},
            None,
            "auto picked searcher optuna (tpe): the objective's trial.suggest_* calls are its space, as in an "
            "Optuna study",
        )
    if scheduler_given and own_searcher is not None:
        searcher, why = own_searcher
        return Choice(dict(searcher), None, f"auto picked searcher {searcher['name']}: {why}")
    if objectives > 1 and "grid" in kinds:
        return Choice(
            {"name": "random"},
            None if scheduler_given else {"name": "fifo"},
            f"auto picked searcher random: {objectives} objectives over a space with grid values, which only "
            "the variant generator expands; FIFO: no scheduler compares several objectives",
        )
    if objectives > 1:
        return Choice(
            {"name": "optuna", "sampler": "tpe"},
            None if scheduler_given else {"name": "fifo"},
            f"auto picked searcher optuna (tpe): {objectives} objectives, which TPE's multi-objective mode "
            "models from few trials (NSGA-II needs generations of them); "
            "FIFO: no scheduler compares several objectives",
        )
    numeric = bool(searched) and kinds <= set(RANGE_KINDS)
    choices = bool(searched) and kinds == {"choice"}
    # A time budget: what it allows each trial of the cap decides whether a GP's proposals pay
    quick = _too_quick_for_gp(time_budget_s, trials)
    handover = time_budget_s is not None and not quick and trials > GP_MAX_TRIALS
    gp_fits = (trials <= GP_MAX_TRIALS or handover) and not quick
    if (numeric or choices) and len(searched) <= GP_MAX_DIMENSIONS and gp_fits and not scheduler_given:
        what = "numeric parameters" if numeric else "parameters of choices only"
        searcher: dict[str, Any] = {"name": "optuna", "sampler": "gp"}
        budget = f"{trials} trials, which a Gaussian process models best"
        if handover:
            searcher["tpe_after"] = GP_MAX_TRIALS
            budget = (
                f"a time budget of {time_budget_s:g} s for up to {trials} trials: a Gaussian process models the "
                f"first {GP_MAX_TRIALS} best, TPE the ones after"
            )
        return Choice(
            searcher,
            {"name": "fifo"},
            f"auto picked searcher optuna (gp): {len(searched)} {what} and {budget}; FIFO: every trial runs its "
            "epochs (values cut short by early stopping would mislead the GP)",
        )
    early = not scheduler_given and trials >= ASHA_MIN_TRIALS and epochs >= ASHA_MIN_EPOCHS
    scheduler = {"name": "asha", "grace_period": 1, "reduction_factor": 3} if early else None
    if scheduler_given:
        stops = "the file's scheduler"
    elif early:
        stops = f"ASHA stops the worst trials early ({trials} trials of {epochs} epochs)"
    else:
        scheduler = {"name": "fifo"}
        stops = f"FIFO: {trials} trials of {epochs} epochs are too few for early stopping to pay"
    if "grid" in kinds:
        searcher, why = {"name": "random"}, "the space has grid values, which only the variant generator expands"
    elif "branches" in kinds:
        searcher, why = {"name": "optuna", "sampler": "tpe"}, "a conditional space, which TPE samples define-by-run"
    elif not searched:
        searcher, why = {"name": "random"}, "nothing is searched"
    else:
        searcher = {"name": "optuna", "sampler": "tpe"}
        why = _tpe_reason(searched, trials, kinds, scheduler_given, time_budget_s)
    name = searcher["name"] + (f" ({searcher['sampler']})" if "sampler" in searcher else "")
    return Choice(searcher, None if scheduler_given else scheduler, f"auto picked searcher {name}: {why}; {stops}")


def _too_quick_for_gp(time_budget_s: float | None, trials: int) -> bool:
    """Whether a time budget gives each trial of the cap less than a GP's proposals want."""
    return time_budget_s is not None and time_budget_s / trials < GP_MIN_TRIAL_S


def _tpe_reason(
    searched: dict[str, ParamSpec], trials: int, kinds: set[str], scheduler_given: bool, time_budget_s: float | None
) -> str:
    if not kinds <= set(RANGE_KINDS) and kinds != {"choice"}:
        return "the space mixes choices and numbers, which TPE models as they are"
    if len(searched) > GP_MAX_DIMENSIONS:
        return f"{len(searched)} parameters, more than a Gaussian process models well"
    if time_budget_s is not None and _too_quick_for_gp(time_budget_s, trials) and not scheduler_given:
        return (
            f"a time budget of {time_budget_s:g} s for up to {trials} trials ({time_budget_s / trials:.2g} s a "
            "trial), where a Gaussian process's proposals would take more time than the trials; TPE's take "
            "milliseconds"
        )
    if trials > GP_MAX_TRIALS:
        return f"{trials} trials, more than a Gaussian process fits quickly"
    return "the file's scheduler may stop trials early, whose partial values TPE takes in its stride"


class AutoSearcher(Searcher):
    """tuner picks the searcher (and the scheduler, if the file names none) from the space,
    the budget and the metric (``pick``), and says what and why when the sweep starts."""

    name: Literal["auto"]

    picks: ClassVar[bool] = True
