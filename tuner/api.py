"""tuner from Python (a notebook, a script): the same sweep as ``python -m tuner sweep``.

    import tuner

    results = tuner.run("mnist_asha.yaml", overrides=["trials.num_samples=8"])
    results.trials          # a pandas DataFrame: one row per trial, its status and best value
    results.best            # the best trial's metrics at its best epoch (best/metrics.json)
    results.export_path     # best/: the exported model (or checkpoint)
    model = results.load_model()  # the exported model, ready to predict
    print(results)          # the trials and the best, as tuner status and tuner sweep print them

``run`` takes a sweep file (a bare name is looked up in experiments/) or a dict with the
same sections; ``tuner.open_results(folder)`` reads a sweep that ran before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.sweepfile.schema import SweepConfig


@dataclass
class Results:
    """A sweep's outcome, read from its folder (what status, best and export read)."""

    folder: Path
    metric: str
    mode: str
    best: dict[str, Any]  # best/metrics.json: trial_id, epoch, the metrics, test scores
    hyperparameters: dict[str, Any]  # the best trial's sampled values
    _sweep: SweepConfig = field(repr=False)

    @property
    def export_path(self) -> Path:
        return self.folder / "best"

    @property
    def trials(self) -> Any:
        """One row per trial: id, status, epochs, best epoch and value, error, its values."""
        import pandas as pd

        rows = [
            {
                "trial_id": s.trial_id,
                "status": s.status,
                "epochs": s.epochs,
                "best_epoch": s.best_epoch,
                f"best_{self.metric}": s.best_value,
                "error": s.error,
                **s.config,
            }
            for s in self._summaries()
        ]
        return pd.DataFrame(rows)

    @property
    def history(self) -> Any:
        """Every epoch of every trial, as the trials reported them."""
        import pandas as pd

        from tuner.folder import records
        from tuner.folder.store import SweepFolder

        histories = records.trial_histories(SweepFolder.open(self.folder))
        return pd.DataFrame([row for rows in histories.values() for row in rows])

    def __str__(self) -> str:
        """The trials as ``tuner status`` lists them; then, once exported, the best trial as
        ``tuner sweep`` ends with it."""
        from tuner.results.tables import best_lines, trials_table

        lines = trials_table(self._sweep, self._summaries())
        if self.best:
            lines += ["", *best_lines(self._sweep, self.best, self.hyperparameters)]
        return "\n".join(lines)

    def _summaries(self) -> list[Any]:
        from tuner.folder.store import SweepFolder
        from tuner.results.summaries import trial_summaries

        return trial_summaries(self._sweep, SweepFolder.open(self.folder))

    def load_model(self) -> Any:
        """The exported model (tuner.results.export.ExportedModel: ``.model``, ``.predict``)."""
        from tuner.results.export import load_best

        return load_best(self.export_path)


def run(
    sweep: str | Path | dict[str, Any],
    overrides: list[str] | tuple[str, ...] = (),
    *,
    smoke: bool = False,
    address: str | None = None,
    verbose: bool = False,
    trainable: Callable[..., Any] | None = None,
    objective: Callable[..., Any] | None = None,
) -> Results:
    """Run a sweep to its end and return its results. ``sweep``: a file, a bare name in
    experiments/, or a dict of sections (its user code is looked up from the working
    folder, or ``code_dir``); ``overrides``: ``["train.epochs=3", ...]`` as ``--set`` takes.
    ``trainable`` / ``objective``: the sweep's training function or Optuna objective as a
    function object, e.g. one defined in the notebook itself (sent to the trials by value,
    as Ray sends a function), in place of a ``module:name`` in the file."""
    from tuner.driver.sweep import run_sweep

    which, function = _given(trainable=trainable, objective=objective)
    config = load(sweep, list(overrides), smoke=smoke, given=(which, function) if which else None)
    outcome = run_sweep(config, address=address, verbose=verbose, function=function)
    return _results(config, outcome.folder.root)


def resume(
    folder: str | Path,
    *,
    address: str | None = None,
    verbose: bool = False,
    trainable: Callable[..., Any] | None = None,
    objective: Callable[..., Any] | None = None,
) -> Results:
    """Resume an interrupted sweep in ``folder`` (as ``tuner resume`` does) and return its
    results; ``trainable`` / ``objective``: the function given to ``run`` when it began, for
    a sweep of a notebook's function."""
    from tuner.driver.sweep import run_sweep
    from tuner.results.summaries import open_sweep

    _, function = _given(trainable=trainable, objective=objective)
    sweep, sweep_folder = open_sweep(folder)
    outcome = run_sweep(sweep, address=address, verbose=verbose, folder=sweep_folder, function=function)
    return _results(sweep, outcome.folder.root)


def _given(**functions: Callable[..., Any] | None) -> tuple[str | None, Callable[..., Any] | None]:
    given = [(which, function) for which, function in functions.items() if function is not None]
    if len(given) > 1:
        raise TunerError("tuner.run: give a trainable or an objective, not both")
    for which, function in given:
        if not callable(function):
            raise TunerError(f"tuner.run: {which}={function!r} is not a function")
        return which, function
    return None, None


def load(
    sweep: str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    *,
    smoke: bool = False,
    given: tuple[str, Callable[..., Any]] | None = None,
) -> SweepConfig:
    """A validated sweep from a file, a bare name or a dict (errors as the CLI words them);
    ``given``: (trainable or objective, a function object) that the sweep runs, named in it
    by ``module:name``."""
    from tuner.driver.own_code import reference
    from tuner.sweepfile import own_code
    from tuner.sweepfile.load import apply_overrides, load_sweep, smoke_overrides, validate
    from tuner.yamlio import LoadedYaml

    overrides = list(overrides or [])
    if given is not None:
        overrides.append(f"{given[0]}={reference(given[1])}")
    if not isinstance(sweep, dict):
        config = load_sweep(str(sweep), overrides, smoke=smoke, import_code=given is None)
    else:
        data = dict(sweep)
        data.setdefault("name", "sweep")
        if smoke:
            data = apply_overrides(data, smoke_overrides(data), file="<dict>")
        data = apply_overrides(data, overrides, file="<dict>")
        config = validate(data, LoadedYaml(data, "<dict>"), import_code=given is None)
    if given is not None:
        config = own_code.check(config, config._origin, given=given[1])
    return config


def open_results(folder: str | Path) -> Results:
    """The results of a sweep that ran before (its folder, as ``tuner status`` takes it)."""
    from tuner.results.summaries import open_sweep

    sweep, sweep_folder = open_sweep(folder)
    return _results(sweep, sweep_folder.root)


def _results(sweep: SweepConfig, folder: Path) -> Results:
    import json

    import yaml

    best_dir = folder / "best"
    best = json.loads((best_dir / "metrics.json").read_text()) if (best_dir / "metrics.json").is_file() else {}
    config = yaml.safe_load((best_dir / "config.yaml").read_text()) if (best_dir / "config.yaml").is_file() else {}
    return Results(folder, sweep.metric, sweep.mode, best, dict(config.get("hyperparameters") or {}), sweep)
