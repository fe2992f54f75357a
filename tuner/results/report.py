"""``tuner report RUN [RUN2]``: one self-contained HTML page about a sweep, plus PNG copies.

Read from the sweep folder alone (finished, interrupted or still running): tuner's own
records (``history/``, ``timeline.jsonl``) and Tune's trial states. The plots are
matplotlib SVGs inlined in the page; the only script is the table's sort, inlined too,
so the file opens anywhere without a network. Both are logged to the sweep's MLflow
parent run under ``report/``.

Plots: best so far against wall time and against epochs spent; every trial's learning
curve coloured by how it ended, with the scheduler's rungs (ASHA, HyperBand) or PBT's
exploits marked; parallel coordinates of the searched hyperparameters against the
metric; hyperparameter importance (Optuna's fANOVA evaluator); the trials over the
sweep's slots in time; a table of trials, sortable by any column.
"""

from __future__ import annotations

import html
import io
import time
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.folder import store
from tuner.results.report_data import Sweep, common_epoch, importance, slot_bars, value_at
from tuner.results.report_plots import (
    plot_best_so_far,
    plot_importance,
    plot_learning_curves,
    plot_parallel,
    plot_pareto,
    plot_timeline,
)


# --- the page -------------------------------------------------------------------------------------
def _svg_and_png(fig: Any, png: Path, written: list[Path]) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    data = io.BytesIO()
    fig.savefig(data, format="png", dpi=110)
    plt.close(fig)
    store.write_atomic(png, data.getvalue())
    written.append(png)
    svg = buffer.getvalue()
    return svg[svg.index("<svg") :]


def _figure_html(svg: str, caption: str, png: str) -> str:
    return (
        f'<figure class="plot">{svg}<figcaption>{html.escape(caption)} '
        f'<a href="{html.escape(png)}">PNG</a></figcaption></figure>'
    )


def _table(sweep: Sweep) -> str:
    epoch = common_epoch(sweep)
    heads = ["trial", "ended", "epochs", f"best {sweep.metric}", "at epoch", f"{sweep.metric} at epoch {epoch}"]
    heads += list(sweep.searched) + ["train minutes"]
    constrained = bool(sweep.config.constraints)
    heads += ["constraints"] if constrained else []
    bars, _ = slot_bars(sweep)
    minutes = {t.trial_id: sum(b.end - b.start for b in bars if b.trial_id == t.trial_id) / 60 for t in sweep.trials}
    body = []
    for trial in sweep.trials:
        at_epoch = value_at(sweep, trial.trial_id, epoch)
        cells = [
            trial.trial_id,
            sweep.ended_label(trial) + (f": {trial.error}" if trial.error else ""),
            trial.epochs,
            trial.best_value,
            trial.best_epoch,
            at_epoch,
            *[trial.config.get(name) for name in sweep.searched],
            round(minutes[trial.trial_id], 2),
            *([_feasibility(trial)] if constrained else []),
        ]
        row = []
        for cell in cells:
            if isinstance(cell, float):
                row.append(f'<td data-v="{cell!r}">{cell:.4g}</td>')
            elif isinstance(cell, int) and not isinstance(cell, bool):
                row.append(f'<td data-v="{cell}">{cell}</td>')
            else:
                row.append(f"<td>{html.escape('' if cell is None else str(cell))}</td>")
        body.append("<tr>" + "".join(row) + "</tr>")
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    return f'<table class="trials"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _feasibility(trial: Any) -> str:
    """The table's constraints cell: met, or which it misses (tuner/folder/constraints.py)."""
    if trial.feasible is None:
        return "-"
    return "met" if trial.feasible else "INFEASIBLE: " + "; ".join(trial.violated)


SORT_SCRIPT = """
document.querySelectorAll("table.trials").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, column) {
    th.addEventListener("click", function () {
      var rows = Array.from(table.tBodies[0].rows);
      var up = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      function key(row) {
        var cell = row.cells[column];
        var v = cell.getAttribute("data-v");
        return v === null ? cell.textContent : parseFloat(v);
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
        return up ? order : -order;
      });
      rows.forEach(function (row) { table.tBodies[0].appendChild(row); });
    });
  });
  table.setAttribute("data-sortable", "ready");
});
"""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.sweeps { display: grid; gap: 2em; grid-template-columns: repeat(auto-fit, minmax(640px, 1fr)); }
figure.plot { margin: 0.8em 0; } figure.plot svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.85em; color: #555; max-width: 60em; }
table.trials { border-collapse: collapse; font-size: 0.85em; }
table.trials th, table.trials td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; }
table.trials th { background: #f0f0f0; cursor: pointer; user-select: none; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
.facts { font-size: 0.9em; } .facts td { padding: 0.1em 1em 0.1em 0; }
"""


def _facts(sweep: Sweep) -> str:
    counts: dict[str, int] = {}
    for trial in sweep.trials:
        counts[trial.status] = counts.get(trial.status, 0) + 1
    chosen = sweep.config.best_epoch(sweep.histories)  # the feasible best, with constraints
    best = f"{chosen.value:.4f}" if chosen else "-"
    if chosen is None and (why := sweep.config.nothing_feasible(sweep.histories)):
        best = why
    spent = sum(len(rows) for rows in sweep.histories.values())
    rows = [
        ("state", "finished" if sweep.finished else "not finished (running, or interrupted: resume continues it)"),
        (
            "trials",
            f"{len(sweep.trials)} of {sweep.config.total_trials}: "
            + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(counts.items())),
        ),
        (
            "search",
            f"searcher {sweep.config.searcher.name}, scheduler {sweep.config.scheduler.name}, "
            f"{sweep.config.mode}imise {sweep.metric}",
        ),
        ("best", best),
        ("epochs spent", f"{spent} of at most {sweep.config.total_trials * sweep.config.max_epochs}"),
        ("folder", sweep.folder.where),
    ]
    return (
        '<table class="facts">'
        + "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
        + "</table>"
    )


def _section(sweep: Sweep, out: Path, prefix: str, written: list[Path]) -> str:
    found = importance(sweep)
    parts = [f"<section><h2>{html.escape(sweep.label)}</h2>", _facts(sweep)]
    name = f"{prefix}best_so_far.png"
    if len(prefix) == 0:  # one sweep: its best-so-far leads its section (a comparison shows both at the top)
        parts.append(
            _figure_html(
                _svg_and_png(plot_best_so_far([sweep]), out / name, written),
                f"Best {sweep.metric} so far against wall time and against epochs spent; dots where it improved.",
                name,
            )
        )
    name = f"{prefix}learning_curves.png"
    rung_text = sweep.config.scheduler.legend
    parts.append(
        _figure_html(
            _svg_and_png(plot_learning_curves(sweep), out / name, written),
            f"{sweep.metric} per epoch of every trial, coloured by how it ended; {rung_text}.",
            name,
        )
    )
    if sweep.config.objectives and any(t.best_value is not None for t in sweep.trials):
        name = f"{prefix}pareto.png"
        chosen = sweep.config.best_epoch(sweep.histories)
        parts.append(
            _figure_html(
                _svg_and_png(plot_pareto(sweep), out / name, written),
                "Several objectives: every trial at its best epoch by "
                f"{sweep.metric}; the line joins the Pareto front (no trial is better in every objective), "
                f"the star is the exported trial, chosen by select: {chosen.rule if chosen else '-'}.",
                name,
            )
        )
    if sweep.searched and any(t.best_value is not None for t in sweep.trials):
        name = f"{prefix}parallel.png"
        parts.append(
            _figure_html(
                _svg_and_png(plot_parallel(sweep), out / name, written),
                "Parallel coordinates: one line per trial through its searched hyperparameters "
                f"to its best {sweep.metric}; log ranges on log axes.",
                name,
            )
        )
    name = f"{prefix}importance.png"
    parts.append(
        _figure_html(
            _svg_and_png(plot_importance(sweep, found), out / name, written),
            f"Hyperparameter importance: {found.method}." + (f" Not computed: {found.note}." if found.note else ""),
            name,
        )
    )
    name = f"{prefix}timeline.png"
    fig, _ = plot_timeline(sweep)
    parts.append(
        _figure_html(
            _svg_and_png(fig, out / name, written),
            "Trials over the sweep's slots (trials that can run at once) in time; gaps are "
            "idle slots; hatched bars have no end recorded (still running, or cut off).",
            name,
        )
    )
    parts.append("<h3>Trials</h3><p class='facts'>Click a column to sort.</p>" + _table(sweep) + "</section>")
    return "\n".join(parts)


def write(sweeps: list[Sweep], out: Path) -> list[Path]:
    """The page and its PNGs in ``out`` (other files there are left alone); returns the
    files written, the page first."""
    written: list[Path] = []
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    title = " vs ".join(s.label for s in sweeps)
    body = [
        f"<h1>tuner report: {html.escape(title)}</h1><p class='facts'>made {generated} by python -m tuner report</p>"
    ]
    if len(sweeps) > 1:
        if len({s.metric for s in sweeps}) > 1 or len({s.config.mode for s in sweeps}) > 1:
            raise TunerError(
                "report: the sweeps optimise different metrics ("
                + ", ".join(f"{s.label}: {s.config.mode} {s.metric}" for s in sweeps)
                + "); compare sweeps of one metric"
            )
        body.append(
            _figure_html(
                _svg_and_png(plot_best_so_far(sweeps), out / "best_so_far.png", written),
                f"Best {sweeps[0].metric} so far of each sweep against wall time and against epochs spent.",
                "best_so_far.png",
            )
        )
    sections = [_section(s, out, f"{i + 1}_" if len(sweeps) > 1 else "", written) for i, s in enumerate(sweeps)]
    body.append('<div class="sweeps">' + "".join(sections) + "</div>")
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>tuner report: {html.escape(title)}'
        f"</title><style>{STYLE}</style></head><body>{''.join(body)}<script>{SORT_SCRIPT}</script></body></html>"
    )
    store.write_atomic(out / "report.html", page)
    return [out / "report.html", *written]


def default_out(sweeps: list[Sweep]) -> Path:
    first = sweeps[0]
    if first.folder.remote:
        raise TunerError(
            f"report: {first.folder.remote} is a storage URI; "
            "give --out DIR for the report (it is logged to MLflow too)"
        )
    if len(sweeps) == 1:
        return first.folder.root / "report"
    return first.folder.root / "report" / f"vs-{sweeps[1].label}"
