"""The bad-input table for a user's own code: every reference a sweep file makes to the
user's modules is checked when the file loads (before Ray starts), and each failure is one
line naming the file, the line, the field and what is wrong. The user's code lives in a
folder of the test's own, beside the sweep file, as a user's would."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tuner.errors import ConfigError
from tuner.sweepfile.load import load_sweep

CODE = {
    "my_train.py": "def train(params, context):\n    context.report({'score': params['x']})\n\n"
    "def three_arguments(params, context, more):\n    pass\n\nNOT_A_FUNCTION = 3\n",
    "broken.py": "import math\nvalue = undefined_name + 1\n",
    "needs_missing.py": "import a_package_nobody_installed\n",
    "my_models.py": "from torch import nn\n\n"
    "def build(width=8, num_classes=10, in_channels=1):\n    return nn.Linear(in_channels * 784, num_classes)\n\n"
    "def only_width(width):\n    return nn.Linear(784, 10)\n",
    "train.py": "print('val_accuracy=0.5')\n",
    "study.py": "def objective(trial):\n    return trial.suggest_float('x', 0, 1)\n\ndef no_trial():\n    return 1.0\n",
}


@dataclass
class Bad:
    id: str
    text: str
    line: int
    match: str


BAD = [
    Bad("module_does_not_import", "trainable: broken:train\nmetric: s\nmode: max\n", 1,
        r"trainable: 'broken:train' does not import: NameError: name 'undefined_name' is not defined$"),
    Bad("module_imports_a_missing_package", "trainable: needs_missing:train\nmetric: s\nmode: max\n", 1,
        r"trainable: 'needs_missing:train' does not import: ModuleNotFoundError: No module named "
        r"'a_package_nobody_installed'$"),
    Bad("no_such_module", "name: x\ntrainable: my_trian:train\nmetric: s\nmode: max\n", 2,
        r"trainable: 'my_trian:train': no module 'my_trian' in .*$"),
    Bad("name_not_in_module", "trainable: my_train:trian\nmetric: s\nmode: max\n", 1,
        r"trainable: 'my_train:trian': module 'my_train' has no 'trian' \(it has: three_arguments, train\)$"),
    Bad("not_a_function", "trainable: my_train:NOT_A_FUNCTION\nmetric: s\nmode: max\n", 1,
        r"trainable: 'my_train:NOT_A_FUNCTION' is a int, not a function$"),
    Bad("function_with_the_wrong_signature", "trainable: my_train:three_arguments\nmetric: s\nmode: max\n", 1,
        r"trainable: 'my_train:three_arguments' has the signature \(params, context, more\), which cannot take 1 "
        r"positional argument: missing a required argument: 'context'; a training function is train\(params, "
        r"context\), or train\(config\) as Ray Tune calls it$"),
    # an Optuna objective (objective:), whose space is its trial.suggest_* calls
    Bad("objective_and_the_files_space", "objective: study:objective\nmode: min\nspace:\n  params:\n    x: 1\n", 4,
        r"space\.params: an objective's space is its own trial\.suggest_\* calls, but the file also searches x; "
        r"remove space\.params \(give a constant to your code as Optuna would: in the objective\)$"),
    Bad("objective_and_a_trainable", "objective: study:objective\ntrainable: my_train:train\nmode: min\n", 1,
        r"objective: a trial runs an objective, a training function or a command, but the file gives the objective "
        r"'study:objective' and trainable 'my_train:train'$"),
    Bad("objective_without_mode", "objective: study:objective\n", 1,
        r"metric: 'value' is your code's own; say whether it is best at max or min \(mode: max or mode: min\)$"),
    Bad("objective_with_a_searcher_that_cannot_answer",
        "objective: study:objective\nmode: min\nsearcher: {name: hyperopt}\n", 3,
        r"searcher\.name: an objective's trial\.suggest_\* calls are answered by an Optuna sampler, which searcher "
        r"'hyperopt' is not; use random or optuna \(or auto\)$"),
    Bad("objective_with_a_scheduler_that_restarts_trials",
        "objective: study:objective\nmode: min\nscheduler: {name: hyperband}\ntrain: {epochs: 9}\n", 3,
        r"scheduler\.name: scheduler 'hyperband' restarts trials from their checkpoints, which an objective does not "
        r"keep; use fifo, asha, pasha, median or pruner$"),
    Bad("pruner_without_an_objective",
        "trainable: my_train:train\nmetric: s\nmode: max\nscheduler: {name: pruner}\n", 4,
        r"scheduler\.name: 'pruner' answers an Optuna objective's trial\.should_prune\(\), but the file has no "
        r"objective; use asha or median for a trainable or command$"),
    Bad("objective_that_takes_no_trial", "objective: study:no_trial\nmode: min\n", 1,
        r"objective: 'study:no_trial' has the signature \(\), which cannot take 1 positional argument: too many "
        r"positional arguments$"),
    Bad("not_a_reference", "trainable: my_train.train\nmetric: s\nmode: max\n", 1,
        r"trainable: expected 'module:function' \(e\.g\. 'my_models:build'\), but got 'my_train\.train'$"),
    Bad("factory_does_not_take_an_option", "model:\n  factory: my_models:build\n  depth: 3\n", 2,
        r"model\.factory: 'my_models:build' has the signature .*, which cannot take the keywords depth, "
        r"num_classes, in_channels: got an unexpected keyword argument 'depth'$"),
    Bad("factory_does_not_take_a_searched_option",
        "model:\n  factory: my_models:only_width\nspace:\n  params:\n    depth: {choice: [1, 2]}\n", 2,
        r"model\.factory: 'my_models:only_width' has the signature \(width\), which cannot take the keywords "
        r"depth: .*$"),
    Bad("tuners_model_with_a_training_function",
        "model:\n  name: cnn\ntrainable: my_train:train\nmetric: s\nmode: max\n", 2,
        r"model\.name: model 'cnn' is trained by tuner's own loop, but the file gives trainable to train instead; "
        r"with trainable, give model\.factory \(to export the best model\) or no model section$"),
    Bad("function_and_command", "trainable: my_train:train\ncommand: [python, train.py]\n", 1,
        r"trainable / command: a trial runs either a training function or a command, but both are given .*$"),
    Bad("own_metric_without_mode", "trainable: my_train:train\nmetric: f1\n", 2,
        r"metric: 'f1' is your code's own; say whether it is best at max or min \(mode: max or mode: min\)$"),
    Bad("loop_setting_with_a_function", "trainable: my_train:train\nmetric: s\nmode: max\ntrain:\n  lr: 0.1\n", 5,
        r"train\.lr: a setting of tuner's own loop, which trainable replaces; give your code its values in "
        r"space\.params \(a constant is a plain value there\) and keep train\.epochs only$"),
    Bad("own_metric_in_tuners_loop", "metric: f1\nmode: max\n", 1,
        r"metric: tuner's loop reports val_accuracy, val_loss, train_loss, params, latency_ms, but got 'f1' .*$"),
    Bad("command_names_an_unknown_field", "command: [python, train.py, --lr, '{lr}']\n", 1,
        r"command: argument 3 '\{lr\}' names \{lr\}, which is neither a searched parameter nor one of epochs, "
        r"trial_id, trial_dir, checkpoint_dir, resume_from$"),
    Bad("command_script_missing", "command: [python, trian.py]\n", 1,
        r"command: script 'trian\.py' is not in the code folder .* \(set code_dir\)$"),
    Bad("command_program_missing", "command: [no-such-program-here, x]\n", 1,
        r"command: program 'no-such-program-here' is neither on the PATH nor in the code folder .*$"),
    Bad("code_dir_missing", "trainable: my_train:train\nmetric: s\nmode: max\ncode_dir: nowhere\n", 4,
        r"code_dir: '.*nowhere' is not a folder$"),
    Bad("unknown_torchvision_builder", "model:\n  name: torchvision:resnet5\n", 2,
        r"model\.name: torchvision has no classification model 'resnet5'; did you mean 'torchvision:resnet50'\?, "
        r"but got 'torchvision:resnet5'$"),
]  # fmt: skip


@pytest.fixture
def code(tmp_path: Path) -> Path:
    for name, text in CODE.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_a_bad_reference_to_the_users_code_is_one_line_with_file_line_and_field(case: Bad, code: Path):
    path = code / "sweep.yaml"
    path.write_text(case.text)
    with pytest.raises(ConfigError) as raised:
        load_sweep(str(path))
    message = str(raised.value)
    assert "\n" not in message
    assert re.match("^" + re.escape(str(path)) + f":{case.line}: " + case.match, message), message


def test_references_to_the_users_code_load_and_the_code_folder_is_made_absolute(code: Path, monkeypatch):
    monkeypatch.chdir("/")  # the sweep file's folder, not the working one, holds the code
    path = code / "sweep.yaml"
    path.write_text(
        "trainable: my_train:train\nmetric: score\nmode: max\nspace:\n  params:\n    x: {uniform: [0, 1]}\n"
    )
    sweep = load_sweep(str(path))
    assert sweep.code_dir == str(code) and sweep.own_loop and not sweep.uses_data and not sweep.has_model
    factory = code / "factory.yaml"
    factory.write_text(
        "model:\n  factory: my_models:build\n  width: 4\nspace:\n  params:\n    width: {choice: [2, 4]}\n"
    )
    sweep = load_sweep(str(factory))
    assert sweep.model.options == {"width": 4} and sweep.searched_model_options() == ["width"]


BAD_AT_START = [
    ("factory_returns_no_module", "model:\n  factory: my_models:not_a_module\n", 2,
     r"model\.factory: 'my_models:not_a_module' returned a dict, not a torch\.nn\.Module$"),
    ("zoo_option_not_taken", "model:\n  name: torchvision:resnet18\n  depth: 3\n", 2,
     r"model\.name: building the model failed: TypeError: .*unexpected keyword argument 'depth'$"),
    ("zoo_weights_missing", "model:\n  name: torchvision:resnet18\n  weights: none.pth\n", 3,
     r"model\.weights: /.*/none\.pth: no such file$"),
    ("zoo_weights_of_another_network", "model:\n  name: torchvision:resnet18\n  weights: small.pth\n", 3,
     r"model\.weights: /.*/small\.pth: key 'weight' is not in the network \(2 such keys\)$"),
]  # fmt: skip


@pytest.mark.parametrize("case", BAD_AT_START, ids=lambda c: c[0])
def test_a_model_that_cannot_be_built_is_refused_before_ray_starts_and_nothing_is_written(case, code: Path):
    from integration_helpers import data_root

    _, text, line, match = case
    (code / "my_models.py").write_text(CODE["my_models.py"] + "\ndef not_a_module():\n    return {}\n")
    import torch

    torch.save(torch.nn.Linear(2, 2).state_dict(), code / "small.pth")
    path = code / "sweep.yaml"
    sweep = yaml.safe_load(text)
    sweep.update(
        name="bad",
        output_dir=str(code / "runs"),
        data={"root": str(data_root()), "train_subset": 200, "download": False},
    )
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "sweep", str(path)], capture_output=True, text=True, cwd=code, timeout=300
    )
    assert done.returncode == 2, done.stdout + done.stderr
    [message] = done.stderr.strip().splitlines()
    assert re.match(rf"^tuner: error: {re.escape(str(path))}:{line}: {match}", message), message
    assert not (code / "runs").exists(), "a refused sweep wrote its folder"
