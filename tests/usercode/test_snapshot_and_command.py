"""The user's code folder as a snapshot, and a command: how it runs (its folder, its code, its
environment, its end), how its printed lines are read, and its metric_pattern's checks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.sweepfile import own_code
from tuner.sweepfile.load import load_sweep
from tuner.sweepfile.schema import SweepConfig
from tuner.trial import command
from tuner.trial.command import Lines, arguments, parse_line
from tuner.trial.context import TrialCodeError
from tuner.usercode import snapshot


def test_a_snapshot_holds_the_python_files_and_is_the_same_wherever_it_is_written(tmp_path):
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "train.py").write_text("import pkg.helpers\n")
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "helpers.py").write_text("VALUE = 3\n")
    for skipped in (".git", "runs", "__pycache__", "data", "venv"):
        (project / skipped).mkdir()
        (project / skipped / "x.py").write_text("")
    (project / "notes.txt").write_text("not code")
    taken = snapshot.take(project)
    assert sorted(taken.files) == ["pkg/__init__.py", "pkg/helpers.py", "train.py"]
    written = taken.materialise()
    assert written.name == taken.digest and (written / "pkg" / "helpers.py").read_text() == "VALUE = 3\n"
    assert taken.materialise() == written  # once per content
    kept = tmp_path / "kept"
    snapshot.write_files(taken.files, kept)
    assert snapshot.read(kept).digest == taken.digest
    (project / "train.py").write_text("changed = True\n")
    assert snapshot.take(project).digest != taken.digest


def test_a_snapshot_imports_ahead_of_a_module_of_the_same_name_imported_before(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, value in ((first, 1), (second, 2)):
        folder.mkdir()
        (folder / "same_name_model.py").write_text(f"VALUE = {value}\n")
    with snapshot.importable(first):
        import same_name_model

        assert same_name_model.VALUE == 1
    with snapshot.importable(second):
        import same_name_model

        assert same_name_model.VALUE == 2
    assert str(second) not in sys.path


@pytest.mark.parametrize(
    "line, metrics",
    [
        ("epoch 3: val_accuracy=0.981 loss=0.05", {"val_accuracy": 0.981, "loss": 0.05}),
        ('{"val_accuracy": 0.5, "note": "x", "ok": true}', {"val_accuracy": 0.5}),
        ("lr = 1e-3, f1=-2.5E+1 acc=.5", {"lr": 1e-3, "f1": -25.0, "acc": 0.5}),
        ("path=/tmp/x version=1.2.3 name=abc", {}),
        ("loss=nan", {"loss": pytest.approx(float("nan"), nan_ok=True)}),
        ("Downloading 100%", {}),
    ],
)
def test_a_printed_line_is_read_as_json_or_name_value_pairs(line, metrics):
    assert parse_line(line) == metrics


def test_a_command_gets_its_fields_and_runs_with_tuners_python():
    filled = arguments(["python", "train.py", "--lr", "{lr}", "--out={trial_dir}/x"], {"lr": 0.01, "trial_dir": "/t"})
    assert filled == [sys.executable, "train.py", "--lr", "0.01", "--out=/t/x"]


KATIB = r"Epoch (?P<epoch>\d+)/\d+ - loss: (?P<loss>[\d.]+) - val_acc: (?P<val_acc>[\d.]+)"


@pytest.mark.parametrize(
    "line, patterns, metrics",
    [
        ("Epoch 2/2 - loss: 0.58 - val_acc: 0.855", [KATIB], {"script_epoch": 2.0, "loss": 0.58, "val_acc": 0.855}),
        ("Epoch 2/2 - loss: nan - val_acc: 0.855", [KATIB], {}),  # the pattern does not match: no metrics
        ("step 7 loss=0.3 acc=0.9", [r"loss=(?P<loss>\S+)", r"acc=(?P<acc>\S+)"], {"loss": 0.3, "acc": 0.9}),
        ("acc=0.9 (best)", [r"acc=(?P<acc>\S+)(?P<note> \(\w+\))?(?P<unused>x)?"], {"acc": 0.9}),  # words, no match
        ("val_accuracy=0.5", [r"loss=(?P<loss>\S+)"], {}),  # with patterns, name=value pairs are not read
    ],
)
def test_a_printed_line_is_read_through_metric_pattern_when_there_is_one(line, patterns, metrics):
    assert parse_line(line, patterns) == metrics


def test_with_patterns_numbers_on_earlier_lines_go_with_the_next_line_holding_the_metric():
    lines = Lines("val_acc", [r"loss: (?P<loss>[\d.]+)", r"val_acc: (?P<val_acc>[\d.]+)"])
    assert lines.read("train loss: 0.9") is None and lines.read("train loss: 0.7") is None
    assert lines.read("val_acc: 0.8") == {"loss": 0.7, "val_acc": 0.8}
    assert lines.read("val_acc: 0.85") == {"val_acc": 0.85}  # what was held went with the last report
    plain = Lines("val_acc")
    assert plain.read("loss=0.9") is None and plain.read("val_acc=0.8") == {"val_acc": 0.8}  # as it always was


def test_a_script_named_relative_to_the_code_folder_is_the_snapshots_file(tmp_path):
    (tmp_path / "scripts").mkdir()
    for name in ("train.py", "scripts/eval.py"):
        (tmp_path / name).write_text("")
    filled = arguments(
        ["python", "train.py", "--then", "scripts/eval.py", "--out", "{trial_dir}/x.py", "-m", "missing.py"],
        {"trial_dir": "/t"},
        tmp_path,
    )
    assert filled == [
        sys.executable, str(tmp_path / "train.py"), "--then", str(tmp_path / "scripts" / "eval.py"),
        "--out", "/t/x.py", "-m", "missing.py",
    ]  # fmt: skip
    assert arguments(["python", "-m", "pkg.train"], {}, tmp_path) == [sys.executable, "-m", "pkg.train"]


class _Trial:
    """What command.run asks of a Context, without Ray: the reports it was given."""

    trial_id, metric, max_epochs, checkpoint, start_epoch, world_size, rank = "t1_00000", "val_acc", 2, None, 0, 1, 0

    def __init__(self, trial_dir):
        self.trial_dir, self.reports, self.reported = trial_dir, 0, []

    def report(self, metrics, checkpoint=None):
        self.reports += 1
        self.reported.append(metrics)


SCRIPT = """
import json, os, sys
from helpers import LOSSES  # beside the script, in the code folder
open("model.pt", "w").write("weights")  # relative: the trial's folder
seen = {"cwd": os.getcwd(), "code": os.environ["TUNER_CODE_DIR"], "path": os.environ["PYTHONPATH"],
        "rank": os.environ["RANK"], "world": os.environ["WORLD_SIZE"], "port": os.environ["MASTER_PORT"]}
print(json.dumps(seen))
for epoch, loss in enumerate(LOSSES, 1):
    print(f"Epoch {epoch}/2 - loss: {loss} - val_acc: {0.8 + epoch / 100:.2f}")
"""


def test_a_command_runs_in_the_trials_folder_with_its_code_importable_and_its_lines_read_by_pattern(
    tmp_path, monkeypatch
):
    code, trial_dir = tmp_path / "code", tmp_path / "trial"
    (code / "pkg").mkdir(parents=True)
    trial_dir.mkdir()
    (code / "train.py").write_text(SCRIPT)
    (code / "helpers.py").write_text("LOSSES = [0.9, 0.58]\n")
    (code / "pkg" / "__init__.py").write_text("")
    (code / "pkg" / "main.py").write_text("import os\nprint(f'val_acc={len(os.listdir())}')\n")
    monkeypatch.setenv("PYTHONPATH", "/the/users/own")
    trial = _Trial(trial_dir)
    command.run(trial, ["python", "train.py"], {}, code, [KATIB])
    assert trial.reported == [
        {"script_epoch": 1.0, "loss": 0.9, "val_acc": 0.81},
        {"script_epoch": 2.0, "loss": 0.58, "val_acc": 0.82},
    ]
    assert (trial_dir / "model.pt").read_text() == "weights" and not (code / "model.pt").exists()
    seen = json.loads((trial_dir / "command.log").read_text().splitlines()[0])
    assert seen["cwd"] == str(trial_dir) and seen["code"] == str(code)
    assert seen["path"] == f"{code}{os.pathsep}/the/users/own"
    assert (seen["rank"], seen["world"]) == ("0", "1") and int(seen["port"]) > 0  # torchrun's, for one process
    module = _Trial(trial_dir)
    command.run(module, ["python", "-m", "pkg.main"], {}, code)  # python -m from the code folder
    assert module.reported == [{"val_acc": 2.0}]  # it ran in the trial's folder: command.log and model.pt


def test_a_command_without_the_metric_says_what_its_patterns_found(tmp_path):
    (tmp_path / "train.py").write_text("print('Epoch 1/2 - loss: 0.9 - accuracy: 0.5')\n")
    said = r"printed no line with the sweep's metric 'val_acc'; its metric_pattern's groups: loss, script_epoch \("
    with pytest.raises(TrialCodeError, match=said + r"its output: tune/.*command\.log in the sweep folder\)$"):
        command.run(
            _Trial(tmp_path), ["python", "train.py"], {}, tmp_path, [r"Epoch (?P<epoch>\d+)/2 - loss: (?P<loss>\S+)"]
        )


IGNORES_SIGTERM = """
import os, signal, subprocess, sys, time
from pathlib import Path
from tuner.trial import command_process

command_process.GRACE_S = 1.0
script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
with command_process.started([sys.executable, "-c", script], dict(os.environ), Path.cwd()) as process:
    print(process.pid, flush=True)
    time.sleep(0.5)  # the child is up and ignoring SIGTERM
    os.kill(os.getpid(), signal.SIGKILL)  # as a Ray Train worker is killed when Tune stops its trial
"""


def test_a_command_that_ignores_sigterm_is_killed_when_the_trials_process_dies(tmp_path):
    done = subprocess.run([sys.executable, "-c", IGNORES_SIGTERM], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists(), "the command outlived its trial's process"


@pytest.mark.parametrize(
    "text, line, match",
    [
        ("trainable: my_train:train\nmetric: s\nmode: max\nmetric_pattern: 's=(?P<s>\\S+)'\n", 4,
         r"metric_pattern: 's=\(\?P<s>\\S\+\)' reads the lines a command prints, but the file gives no command; .*"),
        ("command: [python, train.py]\nmetric: acc\nmode: max\nmetric_pattern: 'acc: (?P<acc>[\\d.]+'\n", 4,
         r"metric_pattern: 'acc: \(\?P<acc>\[\\d\.\]\+' is not a regex: missing \), unterminated subpattern at "
         r"position 5$"),
        ("command: [python, train.py]\nmetric: acc\nmode: max\nmetric_pattern:\n  - 'loss: (?P<loss>\\S+)'\n"
         "  - 'acc: [\\d.]+'\n", 4,
         r"metric_pattern: 'acc: \[\\d\.\]\+' has no named group; name each number it reads, as in "
         r"'acc: \(\?P<acc>\[\\d\.\]\+\)'$"),
        ("command: [python, train.py]\nmetric: acc\nmode: max\nmetric_pattern: 'loss: (?P<loss>\\S+)'\n", 4,
         r"metric_pattern: no pattern has a group named after the sweep's metric 'acc' \(its groups: loss\); .*"),
    ],
    ids=["without_a_command", "not_a_regex", "no_named_group", "no_group_for_the_metric"],
)  # fmt: skip
def test_a_bad_metric_pattern_is_one_line_with_file_line_and_field(tmp_path, text, line, match):
    (tmp_path / "my_train.py").write_text("def train(params, context):\n    pass\n")
    (tmp_path / "train.py").write_text("print('acc: 0.5')\n")
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_sweep(str(path))
    assert re.match("^" + re.escape(str(path)) + f":{line}: " + match, str(raised.value)), str(raised.value)


def test_a_good_metric_pattern_and_a_command_on_several_workers_load():
    sweep = SweepConfig.model_validate(
        {
            "name": "x",
            "command": ["python", "-c", "print(1)"],
            "metric": "val_acc",
            "mode": "max",
            "metric_pattern": KATIB,
            "scaling": {"workers": 2},  # torchrun's variables for each worker's command
        }
    )
    assert own_code.check(sweep, None).metric_pattern == KATIB
