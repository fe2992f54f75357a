"""``searcher: auto``: a searcher, and a scheduler unless the file names one, picked from
the space, the budget and the epochs; the reason is printed when the sweep starts.

The rules (benchmarks/search_quality.py measures them against the alternatives):

- several objectives: Optuna's TPE in its multi-objective mode, and FIFO (no scheduler
  compares several objectives; NSGA-II needs generations of ~50 trials to beat random);
- grid values in the space: the variant generator, the only searcher that expands them;
- a conditional space: Optuna's TPE, which samples it define-by-run;
- only numeric parameters, at most 8 of them, a budget of at most 64 trials and no
  early stopping: Optuna's Gaussian process, which models few points best (a trial
  stopped early reports a worse value than it would have reached: not what a GP wants);
- otherwise: Optuna's TPE, robust to noise, categories and early-stopped trials.
- scheduler, if the file names none: ASHA (grace 1 epoch, reduction factor 3) when there
  are at least 8 trials of at least 3 epochs, so that stopping the worst pays; else FIFO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.spec.spaces import RANGE_KINDS, ParamSpec

GP_MAX_DIMENSIONS = 8
GP_MAX_TRIALS = 64
ASHA_MIN_TRIALS = 8
ASHA_MIN_EPOCHS = 3


@dataclass(frozen=True)
class Choice:
    searcher: dict[str, Any]
    scheduler: dict[str, Any] | None  # None: the file's own
    reason: str


def pick(
    specs: dict[str, ParamSpec], *, trials: int, epochs: int, scheduler_given: bool, objectives: int = 0
) -> Choice:
    searched = {name: spec for name, spec in specs.items() if spec.kind != "constant"}
    kinds = {spec.kind for spec in searched.values()}
    if objectives > 1:
        scheduler = None if scheduler_given else {"name": "fifo"}
        return Choice(
            {"name": "optuna", "sampler": "tpe"},
            scheduler,
            f"auto picked searcher optuna (tpe): {objectives} objectives, which TPE's multi-objective mode "
            "models from few trials (NSGA-II needs generations of ~50); FIFO: no scheduler compares several objectives",
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
    elif (
        kinds <= set(RANGE_KINDS)
        and len(searched) <= GP_MAX_DIMENSIONS
        and trials <= GP_MAX_TRIALS
        and scheduler is not None
        and scheduler["name"] == "fifo"
    ):
        searcher = {"name": "optuna", "sampler": "gp"}
        why = (
            f"{len(searched)} numeric parameters and {trials} trials run to the end: "
            "a Gaussian process models few points best"
        )
    else:
        searcher = {"name": "optuna", "sampler": "tpe"}
        why = _tpe_reason(searched, trials, kinds)
    name = searcher["name"] + (f" ({searcher['sampler']})" if "sampler" in searcher else "")
    return Choice(searcher, None if scheduler_given else scheduler, f"auto picked searcher {name}: {why}; {stops}")


def _tpe_reason(searched: dict[str, ParamSpec], trials: int, kinds: set[str]) -> str:
    if not kinds <= set(RANGE_KINDS):
        return "the space has choices, which TPE models as they are"
    if len(searched) > GP_MAX_DIMENSIONS:
        return f"{len(searched)} parameters, more than a Gaussian process models well"
    if trials > GP_MAX_TRIALS:
        return f"{trials} trials, more than a Gaussian process fits quickly"
    return "trials stopped early report partial values, which TPE takes in its stride"
