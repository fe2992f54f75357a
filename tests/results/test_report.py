"""``tuner report``: the numbers behind its plots (no Ray), then the page of real sweeps,
logged to MLflow, side by side, and opened in a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml
from integration_helpers import small_sweep, start_sweep, tuner_cli

from tuner.folder.store import SweepFolder
from tuner.results import report_data, report_plots
from tuner.results.summaries import TrialSummary
from tuner.sweepfile.schema import SweepConfig

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


# --- the numbers, on made-up trials ------------------------------------------------------------
def _made_up(
    tmp_path: Path, rows: dict[str, list[float]], configs: dict[str, dict], scheduler: dict
) -> report_data.Sweep:
    config = SweepConfig.model_validate(
        {
            "name": "made_up",
            "output_dir": str(tmp_path),
            "train": {"epochs": 4},
            "space": {"params": {"lr": {"loguniform": [1e-4, 1e-1]}, "hidden": {"choice": [64, 128]}}},
            "scheduler": scheduler,
        }
    )
    start = 1_000_000.0
    histories = {
        trial: [
            {"training_iteration": e + 1, "val_accuracy": v, "reported_at": start + 10 * (i + e + 1)}
            for e, v in enumerate(values)
        ]
        for i, (trial, values) in enumerate(rows.items())
    }
    trials = [
        TrialSummary(
            trial_id=trial,
            status="finished" if len(values) == 4 else "stopped_early",
            epochs=len(values),
            config=configs[trial],
            best_epoch=int(np.argmax(values)) + 1,
            best_value=max(values),
            last=histories[trial][-1],
        )
        for trial, values in rows.items()
    ]
    return report_data.Sweep(
        config=config,
        folder=SweepFolder(tmp_path / "made_up"),
        label="made_up",
        trials=trials,
        histories=histories,
        timeline=[],
        searched=config.param_specs(),
        finished=True,
        now=start + 1000,
    )


def test_importance_finds_the_hyperparameter_the_metric_depends_on(tmp_path):
    rng = np.random.default_rng(0)
    lrs = 10 ** rng.uniform(-4, -1, size=24)
    rows, configs = {}, {}
    for i, lr in enumerate(lrs):
        trial = f"t_{i:05d}"
        # The metric follows lr alone; width is noise the evaluator must find unimportant.
        value = 0.9 - 0.05 * (np.log10(lr) + 2.5) ** 2
        rows[trial] = [value - 0.01, value] if i % 2 else [value - 0.02, value - 0.01, value, value]
        configs[trial] = {"lr": float(lr), "hidden": int(rng.choice([64, 128]))}
    sweep = _made_up(tmp_path, rows, configs, {"name": "asha", "grace_period": 1, "reduction_factor": 2})
    found = report_data.importance(sweep)
    assert report_data.common_epoch(sweep) == 2 and "at epoch 2" in found.method and "Fanova" in found.method
    assert found.trials == 24
    assert set(found.values) == {"lr", "hidden"} and sum(found.values.values()) == pytest.approx(1.0)
    assert found.values["lr"] > 0.8 > found.values["hidden"]


def test_importance_says_why_it_cannot_be_computed_for_one_trial(tmp_path):
    sweep = _made_up(tmp_path, {"t_00000": [0.5, 0.6]}, {"t_00000": {"lr": 1e-3, "hidden": 64}}, {"name": "fifo"})
    found = report_data.importance(sweep)
    assert not found.values and "at least two trials" in found.note


def test_best_so_far_only_improves_and_counts_every_epoch_spent(tmp_path):
    rows = {"a_00000": [0.5, 0.7, 0.6, 0.8], "a_00001": [0.75, 0.65]}
    configs = {t: {"lr": 1e-3, "hidden": 64} for t in rows}
    sweep = _made_up(tmp_path, rows, configs, {"name": "fifo"})
    points = report_data.best_so_far(sweep)
    values = [p[2] for p in points]
    assert values == sorted(values) and values[-1] == 0.8
    assert points[-1][1] == 6  # all six epochs were spent
    assert [p[0] for p in points] == sorted(p[0] for p in points)


def test_asha_and_hyperband_rungs(tmp_path):
    configs = {"a_00000": {"lr": 1e-3, "hidden": 64}}
    asha = _made_up(tmp_path, {"a_00000": [0.5]}, configs, {"name": "asha", "grace_period": 1, "reduction_factor": 2})
    assert report_data.rungs(asha) == [1, 2]  # 4 epochs: 1, 2 (4 is the end)
    hyperband = _made_up(tmp_path, {"a_00000": [0.5]}, configs, {"name": "hyperband", "reduction_factor": 2})
    assert report_data.rungs(hyperband) == [1, 2]


def test_trials_fill_slots_without_overlap_and_idle_time_shows(tmp_path):
    configs = {t: {"lr": 1e-3, "hidden": 64} for t in ("x_1", "x_2", "x_3")}
    sweep = _made_up(tmp_path, {t: [0.5] for t in configs}, configs, {"name": "fifo"})
    sweep.timeline = [
        {"time": 0.0, "trial_id": "", "event": "run", "slots": 2},
        {"time": 0.0, "trial_id": "x_1", "event": "start"},
        {"time": 1.0, "trial_id": "x_2", "event": "start"},
        {"time": 5.0, "trial_id": "x_1", "event": "end"},
        {"time": 6.0, "trial_id": "x_3", "event": "start"},
        {"time": 8.0, "trial_id": "x_2", "event": "error"},
    ]  # x_3 has no end: still running at the last record (its epoch at 1,000,030 s)
    sweep.histories = {}
    bars, slots = report_data.slot_bars(sweep)
    assert slots == 2
    by_trial = {b.trial_id: b for b in bars}
    assert by_trial["x_1"].slot == 0 and by_trial["x_2"].slot == 1 and by_trial["x_3"].slot == 0
    assert by_trial["x_2"].status == "errored" and by_trial["x_3"].open and not by_trial["x_1"].open
    for slot in range(slots):
        spans = sorted((b.start, b.end) for b in bars if b.slot == slot)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


# --- real sweeps ---------------------------------------------------------------------------------
class _Page(HTMLParser):
    """The figures of a report page and the SVG shapes inside each; the table's cells."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[int] = []  # drawn shapes per figure
        self.captions: list[str] = []
        self.rows: list[list[str]] = []
        self.sortable = False
        self._in_caption = self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self.figures.append(0)
        elif tag in ("path", "rect", "line", "polyline", "use") and self.figures:
            self.figures[-1] += 1
        elif tag == "figcaption":
            self._in_caption = True
            self.captions.append("")
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._in_cell = True
            self.rows[-1].append("")
        elif tag == "table" and attrs.get("data-sortable") == "ready":
            self.sortable = True

    def handle_endtag(self, tag):
        if tag == "figcaption":
            self._in_caption = False
        elif tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        if self._in_caption:
            self.captions[-1] += data
        if self._in_cell:
            self.rows[-1][-1] += data


def _parse(html_text: str) -> _Page:
    page = _Page()
    page.feed(html_text)
    return page


def test_report_files_are_copied_straight_only_into_an_artifact_folder_on_this_machine():
    from tuner.tracking.mlflow_runs import _local_folder

    assert _local_folder("file:///srv/mlartifacts/1/abc/artifacts") == Path("/srv/mlartifacts/1/abc/artifacts")
    assert _local_folder("file:///srv/my%20runs/abc") == Path("/srv/my runs/abc")
    assert _local_folder("/srv/mlruns/1/abc/artifacts") == Path("/srv/mlruns/1/abc/artifacts")
    for elsewhere in ("s3://bucket/1/abc/artifacts", "mlflow-artifacts:/1/abc/artifacts", "file://host/x", "", "rel/x"):
        assert _local_folder(elsewhere) is None, elsewhere


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """An ASHA sweep of four trials and a one-trial grid on the same space, by the CLI."""
    tmp_path = tmp_path_factory.mktemp("report")
    space = {"params": {"lr": {"loguniform": [5e-4, 5e-3]}, "dropout": {"uniform": [0.1, 0.4]}}}
    files = {
        "asha": small_sweep(
            tmp_path,
            name="asha",
            train={"epochs": 3},
            space=space,
            scheduler={"name": "asha", "grace_period": 1, "reduction_factor": 2},
            trials={"num_samples": 4},
        ),
        "one": small_sweep(tmp_path, name="one", space={"params": {"lr": {"grid": [2e-3]}}}, trials={"num_samples": 1}),
    }
    running = {}
    for name, sweep in files.items():  # both at once, each on a Ray of its own, as two users' would
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(sweep))
        running[name] = start_sweep(path)
    for process in running.values():
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, stderr[-3000:]
    return {name: tmp_path / "runs" / name for name in files}


def _report(*args: str) -> subprocess.CompletedProcess:
    done = tuner_cli("report", *args, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_the_report_of_a_sweep_has_every_plot_and_trial_and_is_logged_to_mlflow(sweeps, tmp_path):
    from mlflow.tracking import MlflowClient

    from tuner.folder.records import read_mlflow_state, trial_histories, write_mlflow_state

    root = sweeps["asha"]
    (root / "report").mkdir()
    mine = root / "report" / "notes.txt"  # a user's own file where the report goes: left alone
    mine.write_text("mine")
    done = _report(str(root))
    page_file = root / "report" / "report.html"
    assert f"wrote {page_file}" in done.stdout
    text = page_file.read_text()
    # Nothing to fetch: no external script, style sheet, image or font (XML namespaces are names).
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|@import|<link\b|<script[^>]*\bsrc""", text)
    page = _parse(text)
    assert len(page.figures) == 5 and all(shapes > 20 for shapes in page.figures), page.figures
    assert any("fANOVA" in caption for caption in page.captions)
    assert any("ASHA's rungs" in caption for caption in page.captions)
    histories = trial_histories(SweepFolder(root))
    trial_rows = [row for row in page.rows if row and row[0] in histories]
    assert sorted(row[0] for row in trial_rows) == sorted(histories)  # one row per trial
    header = next(row for row in page.rows if row and row[0] == "trial")
    assert {"lr", "dropout", "best val_accuracy", "ended"} <= set(header)
    ended = {row[0]: row[header.index("ended")] for row in trial_rows}
    # How each ended, as the sweep's records say (which trials ASHA stops depends on timing).
    from tuner.results.summaries import open_sweep, trial_summaries

    summaries = {t.trial_id: t for t in trial_summaries(*open_sweep(root))}
    for trial_id, label in ended.items():
        trial = summaries[trial_id]
        assert label == (f"stopped after epoch {trial.epochs}" if trial.status == "stopped_early" else trial.status)
    assert set(ended.values()) <= {"finished", "stopped after epoch 1", "stopped after epoch 2"}, ended
    pngs = sorted(p.name for p in (root / "report").glob("*.png"))
    assert pngs == ["best_so_far.png", "importance.png", "learning_curves.png", "parallel.png", "timeline.png"]
    assert all((root / "report" / name).read_bytes()[:4] == b"\x89PNG" for name in pngs)

    state = read_mlflow_state(SweepFolder(root))
    client = MlflowClient(state["tracking_uri"])
    logged = client.list_artifacts(state["parent_run_id"], "report")  # copied into the local artifact folder
    assert sorted(Path(a.path).name for a in logged) == sorted(["report.html", *pngs])

    # A second time: the same files, rewritten; the user's file untouched. Through
    # MLflow's client this time, as for a sweep recorded without its artifact folder.
    write_mlflow_state(SweepFolder(root), {k: v for k, v in state.items() if k != "parent_artifacts"})
    first = page_file.stat().st_mtime_ns
    _report(str(root))
    assert page_file.stat().st_mtime_ns > first and mine.read_text() == "mine"
    logged = client.list_artifacts(state["parent_run_id"], "report")
    assert sorted(Path(a.path).name for a in logged) == sorted(["report.html", *pngs])
    artifact = client.download_artifacts(state["parent_run_id"], "report/report.html", str(tmp_path))
    assert Path(artifact).read_bytes() == page_file.read_bytes()  # the second report's page
    assert sorted(p.name for p in (root / "report").iterdir()) == sorted(["notes.txt", "report.html", *pngs])


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_one_trial_sweep_reports_and_two_sweeps_go_side_by_side(sweeps, tmp_path):
    _report(str(sweeps["one"]), "--out", str(tmp_path / "one"))
    one = _parse((tmp_path / "one" / "report.html").read_text())
    assert len(one.figures) == 5 and all(shapes > 20 for shapes in one.figures), one.figures
    assert any("Not computed: needs at least two trials" in caption for caption in one.captions), one.captions
    both = _report(str(sweeps["asha"]), str(sweeps["one"]))
    page_file = sweeps["asha"] / "report" / "vs-one" / "report.html"
    assert str(page_file) in both.stdout
    page = _parse(page_file.read_text())
    assert "asha" in page_file.read_text() and "one" in page_file.read_text()
    assert len(page.figures) == 1 + 4 + 4 and all(shapes > 20 for shapes in page.figures)


@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_the_report_in_a_real_browser_draws_every_plot_without_console_errors(sweeps, tmp_path):
    page_file = sweeps["asha"] / "report" / "report.html"
    if not page_file.exists():
        _report(str(sweeps["asha"]))

    def render(path: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--window-size=1400,2400",
             *extra, path.as_uri()],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    # The console is read from Chromium's log; a page with an error shows it is read at all.
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>console.error('seen'); notDefined();</script></body></html>")
    assert re.search(r"CONSOLE.*notDefined", render(broken, "--dump-dom").stderr)

    shown = render(page_file, "--dump-dom")
    assert not re.findall(r"CONSOLE[^\n]*", shown.stderr), re.findall(r"CONSOLE[^\n]*", shown.stderr)
    page = _parse(shown.stdout)
    assert page.sortable, "the table's script did not run"
    assert len(page.figures) == 5 and all(shapes > 20 for shapes in page.figures), page.figures

    # Sorting: click the best-metric header twice (descending), as a user would.
    clicking = tmp_path / "click.html"
    clicking.write_text(
        page_file.read_text().replace(
            "</body>",
            "<script>var th = Array.from(document.querySelectorAll('table.trials th'))"
            ".find(function (h) { return h.textContent === 'best val_accuracy'; }); th.click(); th.click();"
            "</script></body>",
        )
    )
    sorted_page = _parse(render(clicking, "--dump-dom").stdout)
    header = next(row for row in sorted_page.rows if row and row[0] == "trial")
    column = header.index("best val_accuracy")
    values = [float(row[column]) for row in sorted_page.rows if row and row[0] != "trial" and len(row) == len(header)]
    assert len(values) == 4 and values == sorted(values, reverse=True)

    screenshot = Path("test-artifacts") / "report.png"  # kept for people to look at
    screenshot.parent.mkdir(exist_ok=True)
    screenshot.unlink(missing_ok=True)
    render(page_file, f"--screenshot={screenshot.resolve()}")
    assert screenshot.is_file() and screenshot.stat().st_size > 50_000


def test_nan_metrics_constant_values_and_pbt_gaps_do_not_break_importance(tmp_path):
    rng = np.random.default_rng(1)
    rows, configs = {}, {}
    for i, lr in enumerate(10 ** rng.uniform(-4, -1, size=12)):
        value = 0.9 - 0.05 * (np.log10(lr) + 2.5) ** 2
        rows[f"t_{i:05d}"] = [value - 0.01, value]
        configs[f"t_{i:05d}"] = {"lr": float(lr), "hidden": 64}  # hidden: one value in every trial
    rows["t_00000"] = [float("nan"), float("nan")]  # a diverged trial
    sweep = _made_up(tmp_path, rows, configs, {"name": "fifo"})
    # A PBT clone that continued at its donor's epoch 3: epochs 1, 3 and 4 in its history.
    sweep.histories["t_00001"] = [
        {**sweep.histories["t_00001"][0], "training_iteration": 1},
        {**sweep.histories["t_00001"][1], "training_iteration": 3},
        {**sweep.histories["t_00001"][1], "training_iteration": 4},
    ]
    assert report_data.value_at(sweep, "t_00000", 2) is None
    assert report_data.value_at(sweep, "t_00001", 2) == sweep.histories["t_00001"][0]["val_accuracy"]
    found = report_data.importance(sweep)
    assert found.trials == 11 and set(found.values) == {"lr"} and found.values["lr"] == pytest.approx(1.0)


def test_a_paused_trial_leaves_its_slot_free_until_it_starts_again(tmp_path):
    configs = {t: {"lr": 1e-3, "hidden": 64} for t in ("p_1", "p_2")}
    sweep = _made_up(tmp_path, {t: [0.5] for t in configs}, configs, {"name": "fifo"})
    sweep.histories = {"p_1": [{"training_iteration": 1, "val_accuracy": 0.5, "reported_at": 3.0},
                               {"training_iteration": 2, "val_accuracy": 0.6, "reported_at": 9.0}]}  # fmt: skip
    sweep.timeline = [
        {"time": 0.0, "trial_id": "", "event": "run", "slots": 1},
        {"time": 0.0, "trial_id": "p_1", "event": "start"},  # paused after its report at 3.0 ...
        {"time": 4.0, "trial_id": "p_2", "event": "start"},
        {"time": 6.0, "trial_id": "p_2", "event": "end"},
        {"time": 6.0, "trial_id": "p_1", "event": "start"},  # ... and started again
        {"time": 9.5, "trial_id": "p_1", "event": "end"},
        {"trial_id": "p_2", "event": "start"},  # no time: left out, not a crash
    ]
    bars, slots = report_data.slot_bars(sweep)
    assert slots == 1
    assert [(b.trial_id, b.start, b.end, b.open) for b in sorted(bars, key=lambda b: b.start)] == [
        ("p_1", 0.0, 3.0, True),
        ("p_2", 4.0, 6.0, False),
        ("p_1", 6.0, 9.5, False),
    ]


def test_choices_of_numbers_sit_on_their_axis_in_numeric_order():
    spec = report_data.ParamSpec("choice", (128, 32, 64))
    positions, ticks = report_plots._axis_position(spec, [128, 32, 64])
    assert positions == [1.0, 0.0, 0.5] and [t for _, t in ticks] == ["32", "64", "128"]
