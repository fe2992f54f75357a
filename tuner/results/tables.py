"""What ``tuner status`` and the end of a sweep print, as lines: the trials' table and the
best trial with the values it was given. The CLI prints them; ``print(results)`` of
``tuner.Results`` shows the same lines."""

from __future__ import annotations

from typing import Any

from tuner.results.summaries import TrialSummary
from tuner.sweepfile.schema import SweepConfig


def trials_table(sweep: SweepConfig, summaries: list[TrialSummary]) -> list[str]:
    """The sweep's line, a row per trial (status, epochs, best value, the values it was
    given), the count of each status and each errored trial's reason."""
    # Tune lists a trial before it starts (and a resumed sweep's unstarted ones as pending);
    # the searcher has not made the rest yet: pending too.
    started = sum(trial.status != "pending" for trial in summaries)
    pending = max(0, sweep.total_trials - started)
    lines = [
        f"sweep {sweep.name}: {started} of {sweep.total_trials} trial(s) started"
        f"{f' ({pending} pending)' if pending else ''}; {sweep.mode}imise {sweep.metric}"
    ]
    searched = [name for name, spec in sweep.flat_specs().items() if spec.kind != "constant"]
    if sweep.objective is not None:  # its space is its trial.suggest_* calls: what they were given
        searched = sorted({name for trial in summaries for name in trial.config})
    constrained = bool(sweep.constraints)  # a column saying whether each trial meets them
    lines.append(
        f"{'trial':<14}{'status':<15}{'epochs':>7}{'best ' + sweep.metric:>20}{'at epoch':>10}"
        + (f"{'feasible':>10}" if constrained else "")
        + ("  hyperparameters" if searched else "")
    )
    for trial in summaries:
        value = f"{trial.best_value:.4f}" if trial.best_value is not None else "-"
        hyper = f"  {values_text({k: v for k, v in trial.config.items() if k in searched})}" if searched else ""
        feasible = f"{FEASIBLE_MARK[trial.feasible]:>10}" if constrained else ""
        lines.append(
            f"{trial.trial_id:<14}{trial.status:<15}{trial.epochs:>7}{value:>20}{trial.best_epoch or '-':>10}"
            f"{feasible}{hyper}"
        )
    counts: dict[str, int] = {}
    for trial in summaries:
        counts[trial.status] = counts.get(trial.status, 0) + 1
    lines.append("  " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    if constrained:
        met = sum(trial.feasible is True for trial in summaries)
        judged = sum(trial.feasible is not None for trial in summaries)
        lines.append(
            f"  {met} of {judged} trial(s) that reported meet the constraints ({', '.join(sweep.constraints)})"
        )
    lines += [f"  {trial.trial_id} errored: {trial.error}" for trial in summaries if trial.error]
    return lines


FEASIBLE_MARK = {True: "yes", False: "NO", None: "-"}  # the status table's feasible column


def best_lines(sweep: SweepConfig, metrics: dict[str, Any], hyperparameters: dict[str, Any]) -> list[str]:
    """The exported trial at its best epoch with its test score, and the values it was
    given (best/metrics.json and best/config.yaml's hyperparameters)."""
    lines = [
        f"best trial {metrics['trial_id']} at epoch {metrics['epoch']}: "
        f"{sweep.metric}={metrics[sweep.metric]:.4f}, {score_on_test(metrics, sweep)}"
    ]
    if hyperparameters:  # nothing searched: no line
        lines.append(f"  hyperparameters: {values_text(hyperparameters)}")
    return lines


def score_on_test(metrics: dict[str, Any], sweep: SweepConfig) -> str:
    """The exported model's test accuracy, or why it has none."""
    if "test_images" not in metrics:
        return "no test score (no model to score: predict needs a model.factory)"
    if metrics.get("test_accuracy") is None:
        spark = sweep.uses_data and sweep.data.dataset == "spark"
        where = "data.spark.test_fraction, or test rows in its split_column" if spark else "add test/ beside train/"
        return f"no test score (the data have no test split: {where})"
    return f"test_accuracy={metrics['test_accuracy']:.4f} on {metrics['test_images']} test images"


def values_text(values: dict[str, Any]) -> str:
    """``optimizer=sgd, lr=0.0075``: hyperparameters on one line."""
    return ", ".join(f"{k}={short(v)}" for k, v in values.items())


def short(value: Any) -> str:
    """A value as the tables show it: a float to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)
