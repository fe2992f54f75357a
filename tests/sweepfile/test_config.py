"""Sweep-file validation: every shipped experiment loads, every kind of mistake is refused
with a message naming file, line, field and value, and the CLI turns that into one line.

No Ray here: loading a sweep file must never need it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tuner.cli import EXIT_USER_ERROR, main
from tuner.errors import ConfigError
from tuner.search.spaces import ParamSpec
from tuner.sweepfile.load import EXPERIMENTS_DIR, SMOKE_OVERRIDES, load_sweep, resolve_sweep_path
from tuner.sweepfile.schema import SweepConfig
from tuner.yamlio import parse_scalar

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted(EXPERIMENTS_DIR.glob("*.yaml"))


def write(directory: Path, text: str, name: str = "bad.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# --- the shipped experiments ------------------------------------------------------------
def test_there_are_experiments_to_check():
    assert EXPERIMENTS, f"no *.yaml in {EXPERIMENTS_DIR}"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_experiment_loads(path: Path):
    sweep = load_sweep(str(path))
    assert isinstance(sweep, SweepConfig)
    assert sweep.name
    assert sweep.mode in ("max", "min")
    assert sweep.param_specs(), "an experiment with nothing to search"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_experiment_loads_in_smoke_mode(path: Path):
    sweep = load_sweep(str(path), smoke=True)
    assert sweep.train.epochs == 2
    assert sweep.trials.num_samples == 2
    assert sweep.data.train_subset == 2000
    assert sweep.data.test_subset == 2000
    assert sweep.trials.time_budget_s is None
    assert getattr(sweep.scheduler, "grace_period", 1) <= sweep.train.epochs


def test_smoke_mode_shrinks_a_grace_period_that_would_not_fit_two_epochs(tmp_path):
    path = write(
        tmp_path,
        """\
        train: {epochs: 8}
        scheduler: {name: asha, grace_period: 4}
        space: {params: {lr: {loguniform: [1.0e-4, 1.0e-2]}}}
    """,
        name="long.yaml",
    )
    assert load_sweep(str(path)).scheduler.grace_period == 4
    smoke = load_sweep(str(path), smoke=True)
    assert (smoke.train.epochs, smoke.scheduler.grace_period) == (2, 1)


def test_smoke_overrides_come_before_the_users_own():
    sweep = load_sweep("mnist_asha", ["trials.num_samples=3"], smoke=True)
    assert sweep.trials.num_samples == 3
    assert "trials.num_samples=2" in SMOKE_OVERRIDES


def test_a_smoke_runs_model_is_not_registered_and_registry_is_validated(tmp_path):
    """A --smoke model must not pass for a version of the real one (tracking.mlflow.registry)."""
    assert load_sweep("mnist_asha").tracking.mlflow.registry is True
    assert load_sweep("mnist_asha", smoke=True).tracking.mlflow.registry is False
    path = write(tmp_path, "tracking:\n  mlflow:\n    registry: 'no'\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:3: tracking\.mlflow\.registry: input should be a valid boolean"):
        load_sweep(str(path))


# --- finding the file -----------------------------------------------------------------------
def test_a_bare_name_resolves_to_the_experiments_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing called mnist_asha here
    expected = EXPERIMENTS_DIR / "mnist_asha.yaml"
    assert resolve_sweep_path("mnist_asha") == expected
    assert resolve_sweep_path("mnist_asha.yaml") == expected
    sweep = load_sweep("mnist_asha")
    assert sweep.name == "mnist_asha"
    assert sweep.scheduler.name == "asha"


def test_a_path_with_a_folder_is_taken_as_given(tmp_path):
    path = tmp_path / "mnist_asha.yaml"
    assert resolve_sweep_path(str(path)) == path
    with pytest.raises(ConfigError, match=re.escape(f"{path}: no such file")):
        load_sweep(str(path))


def test_a_bare_name_that_is_nowhere_says_no_such_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^no_such_sweep: no such file$"):
        load_sweep("no_such_sweep")


# --- defaults and overrides --------------------------------------------------------------------
def test_name_defaults_to_the_file_stem_and_an_explicit_name_wins(tmp_path):
    unnamed = write(tmp_path, "trials: {num_samples: 2}\n", name="my_sweep.v2.yaml")
    assert load_sweep(str(unnamed)).name == "my_sweep.v2"
    named = write(tmp_path, "name: other\n", name="named.yaml")
    assert load_sweep(str(named)).name == "other"


def test_an_empty_mapping_gets_every_default(tmp_path):
    sweep = load_sweep(str(write(tmp_path, "{}\n", name="defaults.yaml")))
    assert (sweep.metric, sweep.mode) == ("val_accuracy", "max")
    assert (sweep.searcher.name, sweep.scheduler.name, sweep.model.name) == ("random", "fifo", "cnn")
    assert sweep.param_specs() == {}


def test_mode_defaults_to_the_metrics_direction(tmp_path):
    sweep = load_sweep(str(write(tmp_path, "metric: val_loss\n")))
    assert sweep.mode == "min"


def test_set_overrides_take_effect():
    base = load_sweep("mnist_asha")
    sweep = load_sweep("mnist_asha", ["trials.num_samples=9"])
    assert base.trials.num_samples != 9
    assert sweep.trials.num_samples == 9


def test_set_values_are_parsed_as_yaml_and_may_create_sections(tmp_path):
    path = write(tmp_path, "name: plain\n")
    sweep = load_sweep(
        str(path),
        [
            "train.lr=2e-3",
            "data.train_subset=500",
            "trials.time_budget_s=null",
            "scaling.use_gpu=false",
            "name=renamed",
        ],
    )
    assert sweep.train.lr == pytest.approx(2e-3)
    assert sweep.data.train_subset == 500
    assert sweep.trials.time_budget_s is None
    assert sweep.scaling.use_gpu is False
    assert sweep.name == "renamed"


def test_set_can_replace_a_whole_search_space():
    sweep = load_sweep("mnist_asha", ["space.params={lr: {uniform: [0.001, 0.002]}}", "space.use=null"])
    specs = sweep.param_specs()
    assert list(specs) == ["lr"]
    assert (specs["lr"].kind, specs["lr"].args) == ("uniform", (0.001, 0.002))


def test_later_overrides_win():
    sweep = load_sweep("mnist_asha", ["trials.num_samples=3", "trials.num_samples=5"])
    assert sweep.trials.num_samples == 5


# --- bad files --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bad:
    """One bad sweep file and what its error must say.

    ``match`` is the message after ``<file>:<line>: `` (``line=None``: any line, or none);
    ``shows`` is text the message must contain for the user to see what was wrong, usually
    the bad value; ``bug`` marks a case that tuner/ still gets wrong: a strict xfail in every
    test of the table, failing with ``raises``.
    """

    id: str
    text: str | None  # None: no file at all
    line: int | None
    match: str
    shows: str
    overrides: tuple[str, ...] = ()
    bug: str | None = None
    raises: type[BaseException] = AssertionError


INT_ADVICE = "is an integer; use randint, choice, grid or a quantized distribution with integer bounds and q, but got "

BAD = [
    Bad("missing_file", None, None, r"no such file$", "no such file"),
    Bad("empty_file", "", None, r"the file is empty$", "empty"),
    Bad("only_comments", "# nothing here\n", None, r"the file is empty$", "empty"),
    Bad(
        "not_yaml", "name: x\n  bad: [1,\n", 2, r"not valid YAML: mapping values are not allowed here", "not valid YAML"
    ),
    Bad("tab_indent", "name: ok\n\t- tab\n", 2, r"not valid YAML: found character '\\t'", "'\\t'"),
    Bad(
        "python_tag",
        "name: x\ndata: !!python/object/apply:os.system ['touch PWNED']\n",
        2,
        r"YAML tag refused \(could not determine a constructor for the tag "
        r"'tag:yaml\.org,2002:python/object/apply:os\.system'\); only plain YAML is read, no Python objects$",
        "python/object/apply:os.system",
    ),
    Bad(
        "custom_tag",
        "name: x\nspace: !include other.yaml\n",
        2,
        r"YAML tag refused \(.*'!include'\); only plain YAML is read, no Python objects$",
        "!include",
    ),
    Bad(
        "unhashable_key",
        "? [a, b]\n: 1\n",
        1,
        r"not valid here: found unhashable key$",
        "unhashable key",
    ),
    Bad(
        "duplicate_key",
        "name: x\ntrials: {num_samples: 2}\nname: y\n",
        3,
        r"name: duplicate key \(first at line 1\)$",
        "duplicate key",
    ),
    Bad(
        "duplicate_nested_key",
        "trials:\n  num_samples: 2\n  max_failures: 1\n  num_samples: 3\n",
        4,
        r"trials\.num_samples: duplicate key \(first at line 2\)$",
        "first at line 2",
    ),
    Bad(
        "duplicate_param",
        "space:\n  params:\n    lr: {uniform: [0.001, 0.01]}\n    dropout: 0.2\n    lr: 0.1\n",
        5,
        r"space\.params\.lr: duplicate key \(first at line 3\)$",
        "space.params.lr: duplicate key",
    ),
    Bad(
        "recursive_alias",
        "name: x\nseed: &loop [*loop]\n",
        2,
        r"seed: input should be a valid integer, but got \[\[\.\.\.\]\]$",
        "[[...]]",
    ),
    Bad(
        "recursive_alias_in_a_section",
        "name: x\ndata: &d {root: *d}\n",
        2,
        r"data\.root: input should be a valid string, but got \{'root': \{\.\.\.\}\}$",
        "{'root': {...}}",
    ),
    Bad(
        "stall_timeout_not_positive",
        "name: x\ntrials:\n  stall_timeout_s: 0\n",
        3,
        r"trials\.stall_timeout_s: input should be 'auto' or input should be greater than 0, but got 0$",
        "but got 0",
    ),
    Bad("not_a_mapping", "- fifo\n- asha\n", 1, r"a sweep file is a mapping of sections, but got list$", "list"),
    Bad(
        "unknown_top_level_key",
        "name: x\nschedular:\n  name: asha\n",
        2,
        r"schedular: unknown key 'schedular'; did you mean 'scheduler'\? \(valid keys: checkpoint, code_dir, command, "
        r"constraints, data, .*scheduler, searcher, seed, select, space, tracking, train, trainable, trials\)$",
        "unknown key 'schedular'",
    ),
    Bad(
        "unknown_nested_key",
        "name: x\ntrials: {num_sample: 3}\n",
        2,
        r"trials\.num_sample: unknown key 'num_sample'; did you mean 'num_samples'\? \(valid keys: max_concurrent, "
        r"max_failures, num_samples, stall_timeout_s, time_budget_s\)$",
        "unknown key 'num_sample'",
    ),
    Bad(
        "unknown_model_key",
        "model:\n  name: cnn\n  hiden: 64\n",
        3,
        r"model\.hiden: unknown key 'hiden'; did you mean 'hidden'\? \(valid keys: batch_norm, conv1, .*\)$",
        "unknown key 'hiden'",
    ),
    Bad(
        "wrong_type_int",
        "trials:\n  num_samples: many\n",
        2,
        r"trials\.num_samples: input should be a valid integer, but got 'many'$",
        "'many'",
    ),
    Bad(
        "wrong_type_float",
        "train:\n  lr: fast\n",
        2,
        r"train\.lr: input should be a valid number, but got 'fast'$",
        "'fast'",
    ),
    Bad(
        "fractional_int",
        "trials:\n  num_samples: 2.5\n",
        2,
        r"trials\.num_samples: input should be a valid integer, but got 2\.5$",
        "2.5",
    ),
    # strict validation: YAML types as written, no "3" -> 3 or true -> 1
    Bad(
        "bool_for_int",
        "scaling:\n  workers: true\n",
        2,
        r"scaling\.workers: input should be a valid integer, but got True$",
        "got True",
    ),
    Bad(
        "string_for_int",
        "train:\n  epochs: '3'\n",
        2,
        r"train\.epochs: input should be a valid integer, but got '3'$",
        "got '3'",
    ),
    Bad(
        "string_for_float",
        "data:\n  val_fraction: '0.2'\n",
        2,
        r"data\.val_fraction: input should be a valid number, but got '0\.2'$",
        "got '0.2'",
    ),
    Bad(
        "float_for_int",
        "seed: 1.0\n",
        1,
        r"seed: input should be a valid integer, but got 1\.0$",
        "got 1.0",
    ),
    Bad(
        "string_for_bool",
        "scaling:\n  use_gpu: 'true'\n",
        2,
        r"scaling\.use_gpu: input should be 'auto' or input should be a valid boolean, but got 'true'$",
        "got 'true'",
    ),
    Bad(
        "section_not_a_mapping",
        "name: x\nscheduler: asha\n",
        2,
        r"scheduler: input should be a valid dictionary.*, but got 'asha'$",
        "'asha'",
    ),
    Bad(
        "num_samples_below_one",
        "trials:\n  num_samples: 0\n",
        2,
        r"trials\.num_samples: input should be greater than or equal to 1, but got 0$",
        "got 0",
    ),
    Bad(
        "workers_below_one",
        "scaling:\n  workers: 0\n",
        2,
        r"scaling\.workers: input should be greater than or equal to 1, but got 0$",
        "got 0",
    ),
    Bad(
        "val_fraction_too_big",
        "data:\n  val_fraction: 1.5\n",
        2,
        r"data\.val_fraction: input should be less than 1, but got 1\.5$",
        "1.5",
    ),
    Bad(
        "lr_written_1e_minus_3_below_zero",
        "train:\n  lr: -1e-3\n",
        2,
        r"train\.lr: input should be greater than 0, but got -0\.001$",
        "-0.001",
    ),
    Bad(
        "bad_name",
        "name: 'my sweep!'\n",
        1,
        r"name: string should match pattern .*, but got 'my sweep!'$",
        "'my sweep!'",
    ),
    Bad(
        "unknown_metric",
        "metric: accuracy\n",
        1,
        r"metric: tuner's loop reports val_accuracy, val_loss, train_loss, params, latency_ms, but got 'accuracy' "
        r"\(a training function or command of your own may report any metric\)$",
        "'accuracy'",
    ),
    Bad(
        "use_gpu_not_bool",
        "scaling:\n  use_gpu: maybe\n",
        2,
        r"scaling\.use_gpu: input should be 'auto' or input should be a valid boolean, but got 'maybe'$",
        "scaling.use_gpu: input should be 'auto'",
    ),
    Bad(
        "unknown_scheduler",
        "name: x\nscheduler:\n  name: ashaa\n",
        3,
        r"scheduler\.name: unknown scheduler 'ashaa'; choose one of: fifo, asha, pasha, hyperband, median, pbt, "
        r"pb2, bohb, dehb, pruner$",
        "'ashaa'",
    ),
    Bad(
        "unknown_searcher",
        "searcher:\n  name: tpe\n",
        2,
        r"searcher\.name: unknown searcher 'tpe'; choose one of: random, grid, optuna, hyperopt, bohb, dehb, auto$",
        "'tpe'",
    ),
    Bad(
        "unknown_dataset",
        "data:\n  dataset: imagenet\n",
        2,
        r"data\.dataset: input should be 'mnist', 'fashion_mnist', 'cifar10', 'synthetic', 'image_folder', "
        r"'parquet' or 'spark', but got 'imagenet'$",
        "'imagenet'",
    ),
    Bad(
        "unknown_model",
        "model:\n  name: vgg\n",
        2,
        r"model\.name: unknown model 'vgg'; choose one of: cnn, resnet18, resnet34, synthetic, "
        r"torchvision:<builder> \(e\.g\. torchvision:resnet50\)$",
        "'vgg'",
    ),
    # inline params: the parameter's own path and line
    Bad(
        "loguniform_low_zero",
        "space:\n  params:\n    dropout: 0.2\n    lr: {loguniform: [0.0, 0.1]}\n",
        4,
        r"space\.params\.lr: loguniform: low must be > 0, but got low=0\.0$",
        "space.params.lr: loguniform",
    ),
    Bad(
        "uniform_low_above_high",
        "space:\n  params:\n    dropout: {uniform: [0.5, 0.1]}\n",
        3,
        r"space\.params\.dropout: uniform: low must be < high, but got low=0\.5, high=0\.1$",
        "space.params.dropout: uniform",
    ),
    Bad(
        "q_not_positive",
        "space:\n  params:\n    hidden: {quniform: [64, 256, 0]}\n",
        3,
        r"space\.params\.hidden: quniform: q must be > 0, but got q=0$",
        "space.params.hidden: quniform",
    ),
    Bad(
        "quantized_bounds_not_multiples_of_q",
        "space:\n  params:\n    lr: 0.01\n    hidden: {quniform: [1, 256, 32]}\n",
        4,
        r"space\.params\.hidden: quniform: low and high must be multiples of q, but got \[1, 256, 32\]$",
        "[1, 256, 32]",
    ),
    Bad(
        "unknown_distribution",
        "space:\n  params:\n    lr: {normal: [0.1, 0.2]}\n",
        3,
        r"space\.params\.lr: unknown distribution 'normal'; choose one of: uniform, loguniform, quniform, "
        r"qloguniform, randint, choice, grid$",
        "space.params.lr: unknown distribution 'normal'",
    ),
    Bad(
        "distribution_arity",
        "space:\n  params:\n    lr: {uniform: [0.1]}\n",
        3,
        r"space\.params\.lr: uniform takes \[low, high\] as numbers, but got \[0\.1\]$",
        "space.params.lr: uniform takes",
    ),
    Bad(
        "recursive_alias_as_a_param",
        "name: x\nspace:\n  params: &p\n    lr: *p\n",
        4,
        r"space\.params\.lr: unknown distribution 'lr'; choose one of: ",
        "space.params.lr: ",
    ),
    # integer hyperparameters take only distributions that sample whole numbers
    Bad(
        "uniform_on_an_integer",
        "space:\n  params:\n    hidden: {uniform: [64, 256]}\n",
        3,
        r"space\.params\.hidden: hidden " + INT_ADVICE + r"uniform \[64, 256\]$",
        "uniform [64, 256]",
        raises=TypeError,
    ),
    Bad(
        "loguniform_on_an_integer",
        "space:\n  params:\n    batch_size: {loguniform: [32, 512]}\n",
        3,
        r"space\.params\.batch_size: batch_size " + INT_ADVICE + r"loguniform \[32, 512\]$",
        "loguniform [32, 512]",
        raises=TypeError,
    ),
    Bad(
        "fractional_q_on_an_integer",
        "space:\n  params:\n    conv2: {quniform: [16, 64, 0.5]}\n",
        3,
        r"space\.params\.conv2: conv2 " + INT_ADVICE + r"quniform \[16, 64, 0\.5\]$",
        "quniform [16, 64, 0.5]",
        raises=TypeError,
    ),
    Bad(
        "uniform_mutation_on_an_integer",
        "train: {epochs: 3}\nscheduler:\n  name: pbt\n  mutations:\n    conv1: {uniform: [8, 32]}\n",
        5,
        r"scheduler\.mutations\.conv1: conv1 " + INT_ADVICE + r"uniform \[8, 32\]$",
        "uniform [8, 32]",
        raises=TypeError,
    ),
    Bad(
        "grace_period_above_epochs",
        "train:\n  epochs: 3\nscheduler:\n  name: asha\n  grace_period: 5\n",
        5,
        r"scheduler\.grace_period: must be <= train\.epochs \(3\), but got 5$",
        "got 5",
    ),
    Bad(
        "scheduler_needs_two_epochs",
        "train:\n  epochs: 1\nscheduler:\n  name: asha\n",
        2,
        r"train\.epochs: scheduler 'asha' needs at least 2 epochs to act, but got 1$",
        "scheduler 'asha'",
    ),
    Bad(
        "bohb_scheduler_without_bohb_searcher",
        "train:\n  epochs: 3\nscheduler:\n  name: bohb\n",
        4,
        r"searcher\.name / scheduler\.name: bohb searcher and bohb scheduler go together, "
        r"but got searcher 'random' with scheduler 'bohb'$",
        "searcher 'random' with scheduler 'bohb'",
    ),
    Bad(
        "bohb_searcher_without_bohb_scheduler",
        "searcher:\n  name: bohb\n",
        2,
        r"searcher\.name / scheduler\.name: bohb searcher and bohb scheduler go together, "
        r"but got searcher 'bohb' with scheduler 'fifo'$",
        "searcher 'bohb' with scheduler 'fifo'",
    ),
    Bad(
        "bohb_with_quantized_param",
        "searcher: {name: bohb}\nscheduler: {name: bohb}\nspace:\n  params:\n    hidden: {quniform: [64, 256, 32]}\n",
        4,
        r"space\.params: bohb drops quantization; use choice instead of quniform/qloguniform$",
        "quniform",
    ),
    Bad(
        "dehb_searcher_with_asha",
        "train:\n  epochs: 9\nsearcher:\n  name: dehb\nscheduler:\n  name: asha\n",
        4,
        r"searcher\.name / scheduler\.name: dehb searcher and dehb scheduler go together, "
        r"but got searcher 'dehb' with scheduler 'asha'$",
        "searcher 'dehb' with scheduler 'asha'",
    ),
    Bad(
        "dehb_scheduler_with_tpe",
        "train:\n  epochs: 9\nsearcher:\n  name: optuna\nscheduler:\n  name: dehb\n",
        4,
        r"searcher\.name / scheduler\.name: dehb searcher and dehb scheduler go together, "
        r"but got searcher 'optuna' with scheduler 'dehb'$",
        "searcher 'optuna' with scheduler 'dehb'",
    ),
    Bad(
        "dehb_with_a_conditional_space",
        "train:\n  epochs: 9\nsearcher: {name: dehb}\nscheduler: {name: dehb}\nspace:\n  params:\n"
        "    optimizer:\n      choice:\n        sgd: {momentum: {uniform: [0.8, 0.99]}}\n        adam: {}\n",
        7,
        r"space\.params\.optimizer: a conditional choice needs searcher random, optuna or hyperopt; searcher 'dehb' "
        r"cannot take one \(DE mutates a fixed vector of parameters\)$",
        "searcher 'dehb'",
    ),
    Bad(
        "dehb_with_two_objectives",
        "train:\n  epochs: 9\nmetric: [val_accuracy, latency_ms]\nmode: [max, min]\nsearcher: {name: dehb}\n"
        "scheduler: {name: dehb}\n",
        6,
        r"scheduler\.name: 'dehb' compares trials by one metric, but the sweep has 2 objectives "
        r"\(val_accuracy, latency_ms\); use fifo \(every trial runs its epochs\)$",
        "'dehb'",
    ),
    Bad(
        "pasha_with_one_rung",
        "train:\n  epochs: 3\nscheduler:\n  name: pasha\n  grace_period: 3\n",
        5,
        r"scheduler\.grace_period: PASHA needs two rungs, so grace_period < train\.epochs \(3\), but got 3$",
        "but got 3",
    ),
    Bad(
        "pasha_negative_epsilon",
        "train:\n  epochs: 9\nscheduler:\n  name: pasha\n  epsilon: -0.1\n",
        5,
        r"scheduler\.epsilon: input should be greater than or equal to 0, but got -0\.1$",
        "-0.1",
    ),
    Bad(
        "grid_with_optuna",
        "searcher:\n  name: optuna\nspace:\n  params:\n    lr: {grid: [0.001, 0.01]}\n",
        4,
        r"space\.params: grid values need the random or grid searcher, but got searcher 'optuna' "
        r"\(use choice instead\)$",
        "searcher 'optuna'",
    ),
    Bad(
        "grid_searcher_without_grid",
        "searcher:\n  name: grid\n",
        2,
        r"searcher\.name: 'grid' needs at least one \{grid: \[\.\.\.\]\} parameter in the space$",
        "needs at least one {grid: [...]} parameter",
    ),
    Bad(
        "unknown_space",
        "space:\n  use: cnnn\n",
        2,
        r"space\.use: no search space named 'cnnn'; choose one of: cnn, optim, resnet, but got 'cnnn'$",
        "named 'cnnn'",
    ),
    Bad(
        "not_a_hyperparameter",
        "space:\n  params:\n    dropout: 0.2\n    lrr: {loguniform: [0.001, 0.01]}\n",
        4,
        r"space\.params\.lrr: not a hyperparameter of model 'cnn'; did you mean 'lr'\? \(searchable: .*\blr, ",
        "of model 'cnn'",
    ),
    Bad(
        "cnn_param_on_resnet",
        "model: {name: resnet18}\nspace:\n  params:\n    conv1: {choice: [8, 16]}\n",
        4,
        r"space\.params\.conv1: not a hyperparameter of model 'resnet18' \(searchable: .*zero_init_residual\)$",
        "of model 'resnet18'",
    ),
    Bad(
        "invalid_choice_value",
        "space:\n  params:\n    optimizer: {choice: [adam, sgdd]}\n",
        3,
        r"space\.params\.optimizer: value 'sgdd' is invalid \(input should be 'adam', 'adamw' or 'sgd'\)$",
        "value 'sgdd'",
    ),
    Bad(
        "range_edge_out_of_bounds",
        "space:\n  params:\n    conv1: {randint: [0, 8]}\n",
        3,
        r"space\.params\.conv1: value 0 is invalid \(input should be greater than or equal to 1\)$",
        "value 0",
    ),
    Bad(
        "registry_space_for_another_model",
        "model: {name: resnet18}\nspace: {use: cnn}\n",
        2,  # the param is in search_spaces/cnn.yaml: the line of `space`
        r"space\.params\.(dropout|conv2|hidden): not a hyperparameter of model 'resnet18' \(searchable: ",
        "of model 'resnet18'",
    ),
    Bad(
        "wrong_mode_for_metric",
        "metric: val_loss\nmode: max\n",
        2,
        r"mode: val_loss is best at min, but got mode='max'$",
        "mode='max'",
    ),
    Bad(
        "direct_runner_with_two_workers",
        "scaling:\n  workers: 2\n  runner: direct\n",
        3,
        r"scaling\.runner: 'direct' runs one worker inside the trial, but scaling\.workers is 2; "
        r"use auto or torch_trainer$",
        "scaling.workers is 2",
    ),
    Bad(
        "unknown_runner",
        "scaling:\n  runner: inline\n",
        2,
        r"scaling\.runner: input should be 'auto', 'direct' or 'torch_trainer', but got 'inline'$",
        "got 'inline'",
    ),
    Bad(
        "pbt_with_optuna",
        "train: {epochs: 3}\nscheduler: {name: pbt}\nsearcher: {name: optuna}\n"
        "space:\n  params:\n    lr: {uniform: [0.001, 0.01]}\n",
        3,
        r"searcher\.name: pbt explores by itself and takes the random searcher, but got 'optuna'$",
        "but got 'optuna'",
    ),
    Bad(
        "pbt_with_nothing_to_mutate",
        "scheduler:\n  name: pbt\n",
        None,
        r"scheduler\.mutations: pbt needs something to mutate: give mutations or a space with a distribution$",
        "pbt needs something to mutate",
    ),
    Bad(
        "pbt_with_only_grid_values",
        "train: {epochs: 3}\nscheduler:\n  name: pbt\n"
        "space:\n  params:\n    lr: {grid: [0.01, 0.1]}\n    momentum: 0.9\n",
        None,
        r"scheduler\.mutations: pbt needs something to mutate: give mutations or a space with a distribution$",
        "pbt needs something to mutate",
    ),
    Bad(
        "pbt_constant_mutation",
        "train: {epochs: 3}\nscheduler:\n  name: pbt\n  mutations:\n    lr: 0.01\n",
        5,
        r"scheduler\.mutations\.lr: pbt mutates with a distribution or a choice, but got constant \[0\.01\]$",
        "constant [0.01]",
        raises=TypeError,
    ),
    Bad(
        "pbt_grid_mutation",
        "train: {epochs: 3}\nscheduler:\n  name: pbt\n  mutations:\n    dropout: {uniform: [0.1, 0.5]}\n"
        "    lr: {grid: [0.01, 0.1]}\n",
        6,
        r"scheduler\.mutations\.lr: pbt mutates with a distribution or a choice, but got grid \[0\.01, 0\.1\]$",
        "grid [0.01, 0.1]",
        raises=TypeError,
    ),
    Bad(
        "pbt_bad_mutation",
        "train: {epochs: 3}\nscheduler:\n  name: pbt\n  mutations:\n    lr: {uniform: [0.5, 0.1]}\n",
        5,
        r"scheduler\.mutations\.lr: uniform: low must be < high, but got low=0\.5, high=0\.1$",
        "scheduler.mutations.lr: uniform",
    ),
    Bad(
        "pbt_mutation_not_a_hyperparameter",
        "scheduler:\n  name: pbt\n  mutations:\n    lrr: {uniform: [0.001, 0.01]}\n",
        4,
        r"scheduler\.mutations\.lrr: not a hyperparameter of model 'cnn'; did you mean 'lr'\?",
        "of model 'cnn'",
    ),
    Bad(
        "set_without_equals",
        "name: x\n",
        None,
        r"--set 'trials\.num_samples': expected key\.path=value$",
        "'trials.num_samples'",
        overrides=("trials.num_samples",),
    ),
    Bad(
        "set_bad_key",
        "name: x\n",
        None,
        r"--set '1trials=3': expected key\.path=value$",
        "'1trials=3'",
        overrides=("1trials=3",),
    ),
    Bad(
        "set_into_a_scalar",
        "name: x\n",
        None,
        r"--set 'name\.first=3': name is not a section$",
        "'name.first=3'",
        overrides=("name.first=3",),
    ),
    Bad(
        "set_bad_value",
        "name: x\ntrials:\n  num_samples: 4\n",
        None,  # said against the --set, not the file's line 3
        r"--set 'trials\.num_samples=0': trials\.num_samples: input should be greater than or equal to 1, but got 0$",
        "got 0",
        overrides=("trials.num_samples=0",),
    ),
    Bad(
        "set_string_for_int",
        "name: x\ntrain:\n  epochs: 4\n",
        None,
        r"--set \"train\.epochs='3'\": train\.epochs: input should be a valid integer, but got '3'$",
        "got '3'",
        overrides=("train.epochs='3'",),
    ),
    Bad(
        "set_bool_for_int",
        "name: x\n",
        None,
        r"--set 'scaling\.workers=true': scaling\.workers: input should be a valid integer, but got True$",
        "got True",
        overrides=("scaling.workers=true",),
    ),
    Bad(
        "set_unknown_scheduler",
        "name: x\n",
        None,
        r"--set 'scheduler\.name=ashaa': scheduler\.name: unknown scheduler 'ashaa'; choose one of: ",
        "'ashaa'",
        overrides=("scheduler.name=ashaa",),
    ),
    Bad(
        "set_typo_in_params",  # issue 39: was said against the file's space.params line
        "name: x\nspace:\n  params:\n    batch_size: 64\n",
        None,
        r"--set 'space\.params\.batchsize=32': space\.params\.batchsize: not a hyperparameter of model 'cnn'; "
        r"did you mean 'batch_size'\?",
        "did you mean 'batch_size'?",
        overrides=("space.params.batchsize=32",),
    ),
    Bad(
        "set_typo_in_a_commands_params",  # a command takes any name: only a near miss is refused
        "name: x\ncommand: [python, train.py, '{batch_size}']\nspace:\n  params:\n    batch_size: 64\n",
        None,
        r"--set 'space\.params\.batchsize=32': space\.params\.batchsize: the sweep has no hyperparameter "
        r"'batchsize'; did you mean 'batch_size'\? \(a new one with a name that close goes in the file's "
        r"space\.params\)$",
        "did you mean 'batch_size'?",
        overrides=("space.params.batchsize=32",),
    ),
    Bad(
        "set_typo_in_a_builders_params",  # torchvision's builders take **kwargs: nothing else would see it
        "name: x\nmodel:\n  name: torchvision:resnet18\n",
        None,
        r"--set 'space\.params\.batchsize=32': space\.params\.batchsize: the sweep has no hyperparameter "
        r"'batchsize'; did you mean 'batch_size'\?",
        "did you mean 'batch_size'?",
        overrides=("space.params.batchsize=32",),
    ),
    # constraints (issue 42): each bad item one line, at its own line, naming constraints[i] and the value
    Bad(
        "constraint_unreadable",
        "name: x\nconstraints:\n  - params < 200000\n  - params\n",
        4,
        r"constraints\[1\]: cannot read it; write '<metric> <op> <number>' with op one of <, <=, >, >=, "
        r"e\.g\. 'params < 200000', but got 'params'$",
        "'params'",
    ),
    Bad(
        "constraint_unknown_operator",
        "name: x\nconstraints:\n  - params == 200000\n",
        3,
        r"constraints\[0\]: unknown operator '=='; use one of <, <=, >, >=, but got 'params == 200000'$",
        "'params == 200000'",
    ),
    Bad(
        "constraint_bound_not_a_number",
        "name: x\nconstraints: ['latency_ms <= fast']\n",
        2,
        r"constraints\[0\]: the bound 'fast' is not a finite number, but got 'latency_ms <= fast'$",
        "'latency_ms <= fast'",
    ),
    Bad(
        "constraint_not_a_string",
        "name: x\nconstraints:\n  - {params: 200000}\n",
        3,
        r"constraints\[0\]: a constraint is a string; write .*, but got \{'params': 200000\}$",
        "{'params': 200000}",
    ),
    Bad(
        "constraints_not_a_list",
        "name: x\nconstraints: params < 200000\n",
        2,
        r"constraints: a list such as \['params < 200000', 'latency_ms <= 2'\], but got 'params < 200000'$",
        "'params < 200000'",
    ),
    Bad(
        "constraint_twice",
        "name: x\nconstraints:\n  - params < 200000\n  - val_loss < 1\n  - params<2e5\n",
        5,
        r"constraints\[2\]: 'params<2e5' repeats constraints\[0\]; give each constraint once$",
        "'params<2e5'",
    ),
    Bad(
        "constraint_on_a_metric_tuners_loop_lacks",
        "name: x\nconstraints:\n  - val_acc >= 0.9\n",
        3,
        r"constraints\[0\]: tuner's loop reports no 'val_acc'; did you mean 'val_accuracy'\? \(it reports "
        r"val_accuracy, val_loss, train_loss, params, latency_ms, lr, compute_s, images_per_s\)$",
        "'val_acc'",
    ),
    Bad(
        "constraint_on_an_objective",
        "name: x\nobjective: my_study:objective\nmode: min\nconstraints: ['value < 1']\n",
        4,
        r"constraints: an objective reports only the value it returns, so there is no metric to constrain; "
        r"run your code as a trainable \(module:function\) that reports the constrained metrics$",
        "objective reports only the value it returns",
    ),
]
assert len({case.id for case in BAD}) == len(BAD)


def bad_cases() -> list:
    """BAD as pytest params: a case with a known bug is a strict xfail that must fail as described."""
    return [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, raises=c.raises, reason=c.bug)) if c.bug else c
        for c in BAD
    ]


def bad_file(case: Bad, directory: Path) -> Path:
    path = directory / "bad.yaml"
    if case.text is not None:
        path.write_text(case.text, encoding="utf-8")
    return path


def expected_message(case: Bad, path: Path) -> str:
    where = re.escape(str(path)) + (rf":{case.line}: " if case.line is not None else r"(:\d+)?: ")
    return "^" + where + case.match.removeprefix("^")


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c.id)
def test_bad_sweep_file_is_refused_with_file_line_field_and_value(case: Bad, tmp_path: Path):
    path = bad_file(case, tmp_path)
    with pytest.raises(ConfigError, match=expected_message(case, path)) as raised:
        load_sweep(str(path), list(case.overrides))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c.id)
def test_bad_sweep_message_shows_what_was_wrong(case: Bad, tmp_path: Path):
    path = bad_file(case, tmp_path)
    with pytest.raises(ConfigError) as raised:
        load_sweep(str(path), list(case.overrides))
    message = str(raised.value)
    assert case.shows in message
    assert not re.search(r"\{\w+(![rs])?\}|\{\{", message), f"unfilled template in: {message}"


def test_the_python_tag_is_not_executed(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, "data: !!python/object/apply:os.system ['touch PWNED']\n")
    with pytest.raises(ConfigError, match=r"YAML tag refused .*; only plain YAML is read, no Python objects$"):
        load_sweep(str(path))
    assert not (tmp_path / "PWNED").exists()


def test_the_bad_table_is_big_enough():
    assert len(BAD) >= 25


# --- reading the file: encoding, aliases, numbers ----------------------------------------------
@pytest.mark.parametrize("content, byte", [(b"\xff\xfe\x00name: x\n", 0), (b"name: x\nseed: \xff\n", 14)])
def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path, content: bytes, byte: int):
    path = tmp_path / "binary.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: not a UTF-8 text file \(byte {byte}\)$"):
        load_sweep(str(path))


def test_a_shared_alias_loads(tmp_path: Path):
    path = write(
        tmp_path,
        """\
        train: {epochs: 3}
        space:
          params:
            lr: &lr {loguniform: [1.0e-4, 1.0e-2]}
            dropout: &p {uniform: [0.1, 0.5]}
        scheduler:
          name: pbt
          mutations: {lr: *lr, dropout: *p}
        """,
    )
    sweep = load_sweep(str(path))
    assert sweep.scheduler.mutations == {"lr": {"loguniform": [1.0e-4, 1.0e-2]}, "dropout": {"uniform": [0.1, 0.5]}}
    assert sweep.param_specs()["lr"] == ParamSpec("loguniform", (1.0e-4, 1.0e-2))


def test_a_merge_key_loads(tmp_path: Path):
    path = write(
        tmp_path,
        """\
        train: {epochs: 3}
        space:
          params: &params
            lr: {loguniform: [1.0e-4, 1.0e-2]}
            dropout: {uniform: [0.1, 0.5]}
        scheduler:
          name: pbt
          mutations:
            <<: *params
        """,
    )
    assert set(load_sweep(str(path)).scheduler.mutations) == {"lr", "dropout"}


def test_a_key_may_override_one_from_a_merge_key(tmp_path: Path):
    path = write(
        tmp_path,
        """\
        train: {epochs: 3}
        space:
          params: &params
            lr: {loguniform: [1.0e-4, 1.0e-2]}
            dropout: {uniform: [0.1, 0.5]}
        scheduler:
          name: pbt
          mutations:
            <<: *params
            lr: {uniform: [0.001, 0.01]}
        """,
    )
    mutations = load_sweep(str(path)).scheduler.mutations
    assert mutations == {"lr": {"uniform": [0.001, 0.01]}, "dropout": {"uniform": [0.1, 0.5]}}


def test_lr_written_1e_minus_3_is_a_float(tmp_path: Path):
    # PyYAML alone reads 1e-3 as the string '1e-3' (YAML 1.1 wants a dot); strict validation
    # would then refuse it, so the loader reads it as YAML 1.2 does.
    assert yaml.safe_load("1e-3") == "1e-3"
    path = write(
        tmp_path,
        """\
        train:
          lr: 1e-3
          weight_decay: 5E-4
        space:
          params:
            lr: {loguniform: [1e-4, 1e-2]}
        """,
    )
    sweep = load_sweep(str(path))
    assert sweep.train.lr == 0.001 and type(sweep.train.lr) is float
    assert sweep.train.weight_decay == 0.0005
    spec = sweep.param_specs()["lr"]
    assert spec == ParamSpec("loguniform", (1.0e-4, 1.0e-2))
    assert all(type(a) is float for a in spec.args)


def test_lr_set_to_1e_minus_3_is_a_float(tmp_path: Path):
    path = write(tmp_path, "name: x\n")
    sweep = load_sweep(str(path), ["train.lr=1e-3", "space.params={lr: {loguniform: [1e-4, 1e-2]}}"])
    assert sweep.train.lr == 0.001 and type(sweep.train.lr) is float
    assert sweep.param_specs()["lr"] == ParamSpec("loguniform", (1.0e-4, 1.0e-2))


@pytest.mark.parametrize(
    "text, value",
    [
        ("1e-3", 0.001),
        ("1E-3", 0.001),
        ("+2.5e2", 250.0),
        ("1e3", 1000.0),
        ("1.0e-3", 0.001),
        ("3", 3),
        ("'3'", "3"),
        ("true", True),
        ("null", None),
        ("adam", "adam"),
        ("1e-3x", "1e-3x"),
        ("[1e-4, 1e-2]", [0.0001, 0.01]),
    ],
)
def test_set_values_are_read_like_the_file(text, value):
    parsed = parse_scalar(text)
    assert parsed == value and type(parsed) is type(value)


def test_strict_validation_still_takes_an_int_for_a_float(tmp_path: Path):
    sweep = load_sweep(str(write(tmp_path, "train: {lr: 1}\ntrials: {time_budget_s: 60}\n")))
    assert sweep.train.lr == 1.0
    assert sweep.trials.time_budget_s == 60


def test_an_integer_hyperparameter_takes_whole_number_distributions(tmp_path: Path):
    path = write(
        tmp_path,
        """\
        space:
          params:
            hidden: {quniform: [64, 256, 32]}
            conv1: {randint: [8, 33]}
            conv2: {choice: [16, 32]}
            batch_size: {qloguniform: [32, 512, 32]}
        """,
    )
    assert set(load_sweep(str(path)).param_specs()) == {"hidden", "conv1", "conv2", "batch_size"}


# --- --set values that are not YAML -------------------------------------------------------------
@pytest.mark.parametrize("override", ["train.lr=[1,", "train.lr=!!python/name:os.system"])
def test_a_set_value_that_is_not_yaml_is_a_config_error(tmp_path: Path, override: str):
    path = write(tmp_path, "name: x\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: --set {re.escape(repr(override))}: ") as raised:
        load_sweep(str(path), [override])
    assert "\n" not in str(raised.value)


def test_a_duplicate_key_in_a_set_value_is_refused(tmp_path: Path):
    path = write(tmp_path, "name: x\n")
    with pytest.raises(ConfigError, match="duplicate key"):
        load_sweep(str(path), ["space.params={lr: 0.001, lr: 0.002}"])


# --- the command line ---------------------------------------------------------------------------
def cli_args(case: Bad, path: Path) -> list[str]:
    return [arg for override in case.overrides for arg in ("--set", override)] + [str(path)]


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c.id)
def test_validate_prints_one_error_line_and_exits_2(case: Bad, tmp_path: Path, capsys):
    path = bad_file(case, tmp_path)
    assert main(["validate", *cli_args(case, path)]) == EXIT_USER_ERROR == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("tuner: error: ")
    assert re.search(expected_message(case, path).removeprefix("^"), lines[0])
    assert "Traceback" not in captured.err


def test_validate_a_binary_file_exits_2(tmp_path: Path, capsys):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00name: x\n")
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err == f"tuner: error: {path}: not a UTF-8 text file (byte 0)\n"


def test_validate_a_good_file_prints_the_resolved_config(capsys):
    assert main(["validate", "mnist_asha"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    resolved = yaml.safe_load(captured.out)
    assert resolved["name"] == "mnist_asha"
    assert resolved["scheduler"]["name"] == "asha"
    assert resolved["mode"] == "max"  # filled in from the metric
    assert captured.out.rstrip().splitlines()[-1].startswith("# mnist_asha: valid; search space: lr, ")


def test_validate_applies_set_and_smoke(capsys):
    assert main(["validate", "mnist_asha", "--smoke", "--set", "trials.num_samples=3"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["trials"]["num_samples"] == 3
    assert resolved["train"]["epochs"] == 2


def test_debug_shows_the_exception(tmp_path: Path):
    path = write(tmp_path, "name: x\ntrials: {num_samples: 0}\n")
    with pytest.raises(ConfigError, match="trials.num_samples"):
        main(["--debug", "validate", str(path)])


def test_python_dash_m_tuner_exits_2_with_one_line(tmp_path: Path):
    path = write(tmp_path, "name: x\nscheduler:\n  name: ashaa\n")
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"tuner: error: {path}:3: scheduler.name: unknown scheduler 'ashaa'; choose one of: ")


def test_a_failing_sweep_writes_nothing(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    path = write(tmp_path, "name: x\nschedular: {name: asha}\n")
    # Guard: if validation ever let this through, the sweep below would start Ray.
    with pytest.raises(ConfigError):
        load_sweep(str(path), [f"output_dir={out}"])
    assert main(["sweep", str(path), "--set", f"output_dir={out}"]) == 2
    assert capsys.readouterr().err.startswith("tuner: error: ")
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c.id)
def test_sweep_with_a_bad_file_exits_2_and_writes_nothing(case: Bad, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a default run would put runs/ and mlflow.db
    path = bad_file(case, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "out"
    assert main(["sweep", *cli_args(case, path), "--set", f"output_dir={out}"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and re.search(expected_message(case, path).removeprefix("^"), lines[0]), lines
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    "scaling, direct",
    [({}, True), ({"workers": 2}, False), ({"runner": "torch_trainer"}, False), ({"runner": "direct"}, True)],
)
def test_one_worker_trials_run_directly_unless_asked_for_a_torch_trainer(scaling, direct):
    sweep = SweepConfig.model_validate({"name": "x", "scaling": scaling})
    assert sweep.scaling.direct is direct


@pytest.mark.parametrize("uri", ["s3://bucket/runs", "gs://bucket/a/b", "s3://bucket/runs?endpoint_override=h:9000"])
def test_a_storage_uri_output_dir_is_kept_as_given(tmp_path, monkeypatch, uri):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "uri.yaml"
    path.write_text(f"output_dir: {uri}\n")
    assert load_sweep(str(path)).output_dir == uri
    assert sorted(p.name for p in tmp_path.iterdir()) == ["uri.yaml"]  # nothing made: no local "s3:" folder


@pytest.mark.parametrize("uri", ["s3://", "s3:///runs", "://bucket/runs"])
def test_an_output_dir_uri_without_bucket_and_folder_is_refused_in_one_line(tmp_path, monkeypatch, uri):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "uri.yaml"
    path.write_text(f"output_dir: {uri}\n")
    with pytest.raises(ConfigError, match=rf"uri\.yaml:1: output_dir: not a storage URI .*'{re.escape(uri)}'$"):
        load_sweep(str(path))


def test_a_set_may_add_a_new_hyperparameter_to_a_command_or_replace_one(tmp_path: Path):
    """Only a near miss of a name the sweep has is refused: a new name, or one the file has, is taken."""
    path = write(tmp_path, "name: x\ncommand: [python, train.py]\nspace:\n  params:\n    lr: 0.1\n    batch_size: 64\n")
    added = ["space.params.lr2={uniform: [0, 1]}", "space.params.batch_size=32", "space.params.warmup=10"]
    sweep = load_sweep(str(path), added, import_code=False)
    assert sweep.space.params == {"lr": 0.1, "batch_size": 32, "lr2": {"uniform": [0, 1]}, "warmup": 10}
