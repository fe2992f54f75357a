"""HyperBand and BOHB's scheduler (Li et al. 2018; Falkner et al. 2018), as Ray Tune has
them, plus one guard: a trial that no bracket will run again is stopped.

HyperBand pauses a trial with a checkpoint save and later stops it (a loser of its
bracket's halving, or its bracket finished). Under load, with trial processes reused
(the direct runner), Tune 2.60 was seen to stop such a trial and then mark it PAUSED
again. No bracket holds it any more, so nothing resumes it, and Tune waits for it
for ever (docs/ray-notes.md, "HyperBand under load"). Whenever Tune asks what to run
next, the scheduler stops such trials first.

Imported by tuner/search/registry.py's builders only (it imports Ray).
"""

from __future__ import annotations

import logging
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import HyperBandForBOHB, HyperBandScheduler


def let_go(scheduler: HyperBandScheduler, trial: Trial) -> bool:
    """Whether no bracket of ``scheduler`` will ever run ``trial`` again: it is in none,
    its bracket dropped it (halving's losers), or its bracket is finished."""
    bracket = scheduler._trial_info.get(trial, (None,))[0]  # Ray 2.60's bookkeeping
    return bracket is None or trial not in bracket.current_trials() or bracket.finished()


def stop_let_go(scheduler: HyperBandScheduler, tune_controller: Any) -> None:
    for trial in tune_controller.get_trials():
        if trial.status == Trial.PAUSED and let_go(scheduler, trial):
            logging.getLogger(__name__).info("stopping %s: PAUSED, but no bracket will run it again", trial)
            tune_controller.stop_trial(trial)


class HyperBand(HyperBandScheduler):
    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        stop_let_go(self, tune_controller)
        return super().choose_trial_to_run(tune_controller)


class BohbHyperBand(HyperBandForBOHB):
    # Tune's own calls itself again with allow_recurse=False once a bracket is processed with
    # no trial running (without the keyword here, that sweep failed: seen in
    # benchmarks/studies/search_quality.py on Branin, 108 trials).
    def choose_trial_to_run(self, tune_controller: Any, allow_recurse: bool = True) -> Trial | None:
        stop_let_go(self, tune_controller)
        return super().choose_trial_to_run(tune_controller, allow_recurse=allow_recurse)
