"""PASHA as a Ray Tune scheduler (tuner/search/pasha.py says what and why). Imported by
its builder only (it imports Ray).

Rungs as ASHA's (stopping variant, as Ray's ASHA): at a rung below the current top, a trial
goes on only if it is in the best ``1/reduction_factor`` of the trials recorded there
before it. The top starts at the second rung. When a trial reaches the top rung, the
trials recorded at both the top and the rung below are ranked by each; if some pair's
order flips by more than ``epsilon`` at both rungs (a soft ranking: closer values tie),
the ranking is not settled and the top moves up a rung (the trial goes on, judged as
ASHA judges it); else the trial ends there, trained as far as the sweep needs.

``epsilon`` unset: the 90th percentile of the gaps between pairs of trials whose order
swaps from one epoch to the next (noise in the learning curves, as the paper estimates it).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from tuner.search.base import TIME_ATTR


class Pasha(FIFOScheduler):
    def __init__(
        self, *, metric: str, mode: str, levels: list[int], reduction_factor: float, epsilon: float | None = None
    ):
        super().__init__()
        self._metric, self._mode = metric, mode
        self.levels, self.rf, self.fixed_epsilon = levels, reduction_factor, epsilon
        self.top = min(1, len(levels) - 1)  # the index of the current maximum rung
        self.recorded: list[dict[str, float]] = [{} for _ in levels]  # per rung: trial -> value (higher better)
        self.curves: dict[int, dict[str, float]] = {}  # epoch -> trial -> value, for epsilon
        self.gaps: list[float] = []  # between pairs of trials whose order swapped from one epoch to the next

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # metric and mode come from the sweep

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        value, epoch = result.get(self._metric), int(result.get(TIME_ATTR, 0))
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return TrialScheduler.CONTINUE
        score = value if self._mode == "max" else -value
        self._note_crossings(trial.trial_id, epoch, score)
        action = TrialScheduler.CONTINUE
        for rung, milestone in enumerate(self.levels):
            recorded = self.recorded[rung]
            if epoch < milestone or trial.trial_id in recorded:
                continue
            cutoff = self._cutoff(recorded)
            recorded[trial.trial_id] = score
            if rung == self.top:
                if self.top < len(self.levels) - 1 and self._unsettled():
                    self.top += 1  # the ranking is still changing: train further
                else:
                    return TrialScheduler.STOP  # as far as the sweep trains for now
            if cutoff is not None and score < cutoff:
                action = TrialScheduler.STOP
            break
        return action

    def _cutoff(self, recorded: dict[str, float]) -> float | None:
        if not recorded:
            return None
        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))

    def _unsettled(self) -> bool:
        """Whether the top two rungs rank their common trials differently (soft ranking)."""
        upper, lower = self.recorded[self.top], self.recorded[self.top - 1]
        common = [t for t in upper if t in lower]
        eps = self.epsilon()
        for a, b in itertools.combinations(common, 2):
            before, after = lower[a] - lower[b], upper[a] - upper[b]
            if (before > eps and after < -eps) or (before < -eps and after > eps):
                return True
        return False

    def _note_crossings(self, trial_id: str, epoch: int, score: float) -> None:
        """Keep ``score`` and the gaps to every trial whose order against this one swapped
        since the epoch before (each pair once: when the later of the two reports)."""
        now = self.curves.setdefault(epoch, {})
        now[trial_id] = score
        before = self.curves.get(epoch - 1, {})
        if trial_id not in before:
            return
        mine = before[trial_id]
        for other, theirs in now.items():
            if other != trial_id and other in before and (mine - before[other]) * (score - theirs) < 0:
                self.gaps.append(abs(score - theirs))

    def epsilon(self) -> float:
        if self.fixed_epsilon is not None:
            return self.fixed_epsilon
        return float(np.percentile(self.gaps, 90)) if self.gaps else 0.0

    def debug_string(self) -> str:
        return f"PASHA: top rung {self.levels[self.top]} epochs of {self.levels[-1]}"
