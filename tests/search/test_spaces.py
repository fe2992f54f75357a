"""Search spaces: the YAML forms parse, convert to the right Tune domain and sample inside
their bounds; bad forms say what is wrong; the registry in search_spaces/ loads.

Converting imports ``ray.tune`` but never starts Ray.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from ray.tune.search import sample

from tuner.errors import ConfigError
from tuner.search import spaces
from tuner.search.spaces import ParamSpec, load_registry_space, parse_param, registry_names, to_param_space
from tuner.sweepfile.schema import SweepConfig

DRAWS = 50


def is_multiple(value: float, q: float) -> bool:
    return math.isclose(value / q, round(value / q), abs_tol=1e-9)


def draws(domain) -> list:
    """DRAWS single samples from a Tune domain, seeded so the statistics below are stable."""
    rng = np.random.default_rng(0)
    return [domain.sample(random_state=rng) for _ in range(DRAWS)]


# --- every kind: parse, convert, sample -------------------------------------------------------
def test_uniform():
    spec = parse_param({"uniform": [0.1, 0.4]})
    assert spec == ParamSpec("uniform", (0.1, 0.4))
    domain = spec.to_tune()
    assert isinstance(domain, sample.Float)
    assert isinstance(domain.get_sampler(), sample.Float._Uniform)
    values = draws(domain)
    assert all(0.1 <= v <= 0.4 for v in values)
    assert len(set(values)) > DRAWS // 2  # continuous, not a handful of values


def test_loguniform():
    domain = parse_param({"loguniform": [1.0e-5, 1.0e-1]}).to_tune()
    assert isinstance(domain, sample.Float)
    assert isinstance(domain.get_sampler(), sample.Float._LogUniform)
    values = draws(domain)
    assert all(1.0e-5 <= v <= 1.0e-1 for v in values)
    # log-uniform: about half the draws fall below the geometric midpoint 1e-3
    assert 10 <= sum(v < 1.0e-3 for v in values) <= 40


@pytest.mark.parametrize("low, high, q", [(64, 192, 32), (0.0, 0.5, 0.1), (-1.0, 1.0, 0.25)])
def test_quniform(low, high, q):
    spec = parse_param({"quniform": [low, high, q]})
    assert spec.is_quantized
    domain = spec.to_tune()
    assert isinstance(domain, sample.Float)
    sampler = domain.get_sampler()
    assert isinstance(sampler, sample.Quantized)
    assert sampler.q == q
    assert isinstance(sampler.sampler, sample.Float._Uniform)
    for value in draws(domain):
        assert low - 1e-9 <= value <= high + 1e-9
        assert is_multiple(value, q), value


def test_qloguniform():
    spec = parse_param({"qloguniform": [8, 512, 8]})
    assert spec.is_quantized
    domain = spec.to_tune()
    sampler = domain.get_sampler()
    assert isinstance(sampler, sample.Quantized)
    assert isinstance(sampler.sampler, sample.Float._LogUniform)
    for value in draws(domain):
        assert 8 <= value <= 512
        assert is_multiple(value, 8), value


def test_randint_excludes_high():
    spec = parse_param({"randint": [16, 20]})
    domain = spec.to_tune()
    assert isinstance(domain, sample.Integer)
    values = draws(domain)
    assert all(isinstance(v, int) for v in values)
    assert set(values) <= {16, 17, 18, 19}
    assert len(set(values)) >= 3
    assert spec.representative_values() == [16, 19]


def test_choice():
    spec = parse_param({"choice": ["adam", "adamw", "sgd"]})
    domain = spec.to_tune()
    assert isinstance(domain, sample.Categorical)
    assert domain.categories == ["adam", "adamw", "sgd"]
    values = draws(domain)
    assert set(values) <= {"adam", "adamw", "sgd"}
    assert len(set(values)) >= 2
    assert spec.representative_values() == ["adam", "adamw", "sgd"]


def test_grid():
    spec = parse_param({"grid": [64, 128]})
    assert spec.kind == "grid"
    assert spec.to_tune() == {"grid_search": [64, 128]}
    assert spec.representative_values() == [64, 128]


@pytest.mark.parametrize("value", [0.9, "adam", 128, True, None, [1, 2]])
def test_a_plain_value_is_a_constant(value):
    spec = parse_param(value)
    assert spec == ParamSpec("constant", (value,))
    assert spec.to_tune() == value
    assert spec.representative_values() == [value]
    assert not spec.is_quantized


def test_representative_values_are_the_edges_a_sample_can_take():
    assert parse_param({"uniform": [0.1, 0.4]}).representative_values() == [0.1, 0.4]
    assert parse_param({"quniform": [64, 192, 32]}).representative_values() == [64, 192]


def test_to_param_space_converts_every_parameter():
    specs = {
        "lr": parse_param({"loguniform": [1.0e-4, 1.0e-2]}),
        "optimizer": parse_param({"choice": ["adam", "sgd"]}),
        "batch_size": parse_param({"grid": [64, 128]}),
        "momentum": parse_param(0.9),
    }
    space = to_param_space(specs)
    assert list(space) == ["lr", "optimizer", "batch_size", "momentum"]
    assert isinstance(space["lr"], sample.Float)
    assert isinstance(space["optimizer"], sample.Categorical)
    assert space["batch_size"] == {"grid_search": [64, 128]}
    assert space["momentum"] == 0.9


# --- bad specs --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, match",
    [
        (
            {"uniform": [0, 1], "loguniform": [0.1, 1]},
            r"one key \(one of: uniform, .*\), but got keys \['loguniform', 'uniform'\]",
        ),
        ({}, r"a distribution is a mapping with one key .*, but got keys \[\]"),
        (
            {"normal": [0, 1]},
            r"unknown distribution 'normal'; choose one of: uniform, loguniform, quniform, qloguniform, "
            r"randint, choice, grid$",
        ),
        ({"uniform": 0.5}, r"uniform takes a non-empty list, but got 0\.5"),
        (
            {"choice": []},
            r"choice takes a non-empty list or a mapping from each value to its own parameters, but got \[\]",
        ),
        ({"grid": "abc"}, r"grid takes a non-empty list, but got 'abc'"),
        ({"uniform": [0.1]}, r"uniform takes \[low, high\] as numbers, but got \[0\.1\]"),
        ({"uniform": [0.1, 0.2, 0.3]}, r"uniform takes \[low, high\] as numbers, but got \[0\.1, 0\.2, 0\.3\]"),
        ({"quniform": [0, 10]}, r"quniform takes \[low, high, q\] as numbers, but got \[0, 10\]"),
        ({"qloguniform": [1, 10, 1, 1]}, r"qloguniform takes \[low, high, q\] as numbers"),
        ({"uniform": ["a", "b"]}, r"uniform takes \[low, high\] as numbers, but got \['a', 'b'\]"),
        ({"uniform": [True, 2]}, r"uniform takes \[low, high\] as numbers, but got \[True, 2\]"),
        ({"randint": [1.5, 8]}, r"randint takes integers \[low, high\), but got \[1\.5, 8\]"),
        ({"uniform": [0.5, 0.1]}, r"uniform: low must be < high, but got low=0\.5, high=0\.1"),
        ({"uniform": [0.5, 0.5]}, r"uniform: low must be < high, but got low=0\.5, high=0\.5"),
        ({"randint": [8, 8]}, r"randint: low must be < high, but got low=8, high=8"),
        ({"loguniform": [0.0, 0.1]}, r"loguniform: low must be > 0, but got low=0\.0"),
        ({"loguniform": [-1.0, 0.1]}, r"loguniform: low must be > 0, but got low=-1\.0"),
        ({"qloguniform": [0, 64, 8]}, r"qloguniform: low must be > 0, but got low=0"),
        ({"quniform": [0, 64, 0]}, r"quniform: q must be > 0, but got q=0"),
        ({"qloguniform": [8, 64, -8]}, r"qloguniform: q must be > 0, but got q=-8"),
        ({"uniform": [0.0, float("inf")]}, r"uniform: bounds must be finite, but got \[0\.0, inf\]"),
        ({"uniform": [float("nan"), 1.0]}, r"uniform: (low must be < high|bounds must be finite)"),
        # Tune's quantized() refuses these, but only in to_tune(), after Ray has started
        (
            {"quniform": [1, 256, 32]},
            r"^quniform: low and high must be multiples of q, but got \[1, 256, 32\]$",
        ),
        (
            {"qloguniform": [10, 250, 32]},
            r"^qloguniform: low and high must be multiples of q, but got \[10, 250, 32\]$",
        ),
        (
            {"quniform": [0.0, 1.0, 0.3]},
            r"^quniform: low and high must be multiples of q, but got \[0\.0, 1\.0, 0\.3\]$",
        ),
        pytest.param(
            {"quniform": [0, float("inf"), 1]},
            r"^quniform: bounds must be finite, but got \[0, inf, 1\]$",
            id="quniform-inf",
        ),
    ],
)
def test_bad_spec_says_what_is_wrong(value, match):
    with pytest.raises(ValueError, match=match):
        parse_param(value)


@pytest.mark.parametrize(
    "spec",
    [
        {"quniform": [64, 192, 64]},
        {"qloguniform": [8, 512, 8]},
        {"quniform": [0.0, 0.5, 0.1]},
        {"quniform": [-1.0, 1.0, 0.25]},
        {"quniform": [0.1, 0.3, 0.1]},  # 0.3 / 0.1 is 2.9999999999999996: close enough, for Tune too
        {"qloguniform": [0.001, 0.1, 0.001]},
    ],
)
def test_a_spec_that_parses_converts_to_tune(spec):
    """What validation accepts must convert: otherwise the error comes after Ray has started."""
    parse_param(spec).to_tune()


# --- the registry in search_spaces/ -------------------------------------------------------------
# Which models each registry space is written for: a new space needs an entry here.
SPACE_MODELS = {"cnn": ["cnn"], "optim": ["cnn", "resnet18", "resnet34"], "resnet": ["resnet18", "resnet34"]}


def test_registry_has_the_documented_spaces():
    names = registry_names()
    assert {"cnn", "resnet"} <= set(names)
    assert names == sorted(names)
    assert set(names) == set(SPACE_MODELS), "describe a new search space in SPACE_MODELS"


@pytest.mark.parametrize("name", registry_names())
def test_every_registry_space_loads(name):
    specs = load_registry_space(name)
    assert specs
    assert all(isinstance(spec, ParamSpec) for spec in specs.values())
    assert any(spec.kind not in ("constant", "grid") for spec in specs.values()), "nothing to sample"
    space = to_param_space(specs)
    assert set(space) == set(specs)


@pytest.mark.parametrize("name, model", [(n, m) for n, models in SPACE_MODELS.items() for m in models])
def test_every_registry_space_validates_with_its_models(name, model):
    sweep = SweepConfig.model_validate({"name": "t", "model": {"name": model}, "space": {"use": name}})
    assert sweep.param_specs() == load_registry_space(name)


def test_registry_spaces_contents():
    cnn = load_registry_space("cnn")
    assert cnn["lr"] == ParamSpec("loguniform", (3.0e-4, 3.0e-3))
    assert cnn["hidden"].kind == "quniform"
    resnet = load_registry_space("resnet")
    assert resnet["optimizer"] == ParamSpec("constant", ("sgd",))
    assert resnet["momentum"].kind == "uniform"


def test_an_unknown_registry_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"no search space named 'nope' in .*; choose one of: cnn, optim, resnet"):
        load_registry_space("nope")


@pytest.mark.parametrize(
    "text, match",
    [
        ("description: x\n", r"space\.yaml:1: a search space file needs a 'params' mapping$"),
        ("- lr\n", r"space\.yaml:1: a search space file needs a 'params' mapping$"),
        (
            "params:\n  lr: 0.1\nparam:\n  x: 1\n",
            r"space\.yaml:3: unknown key 'param'; valid keys: description, params$",
        ),
        (
            "description: x\nparams:\n  lr: {loguniform: [0.0, 0.1]}\n",
            r"space\.yaml:3: params\.lr: loguniform: low must be > 0, but got low=0\.0$",
        ),
        (
            "params:\n  lr: !!python/name:os.system\n",
            r"space\.yaml:2: YAML tag refused \(.*python/name:os\.system'\); only plain YAML is read, "
            r"no Python objects$",
        ),
        (
            "params:\n  lr: 0.1\n  dropout: 0.2\n  lr: 0.2\n",
            r"space\.yaml:4: params\.lr: duplicate key \(first at line 2\)$",
        ),
        (
            "params:\n  hidden: {quniform: [1, 256, 32]}\n",
            r"space\.yaml:2: params\.hidden: quniform: low and high must be multiples of q, but got \[1, 256, 32\]$",
        ),
        ("params: &p\n  lr: *p\n", r"space\.yaml:2: params\.lr: unknown distribution 'lr'; choose one of: "),
        ("? [a]\n: 1\n", r"space\.yaml:1: not valid here: found unhashable key$"),
    ],
)
def test_a_bad_registry_file_names_file_line_and_param(text, match, tmp_path, monkeypatch):
    # Point the registry at a scratch folder rather than writing into search_spaces/.
    monkeypatch.setattr(spaces, "SPACES_DIR", tmp_path)
    (tmp_path / "space.yaml").write_text(text)
    assert registry_names() == ["space"]
    with pytest.raises(ConfigError, match=r"^search_spaces/" + match):
        load_registry_space("space")


def test_a_registry_file_that_is_not_utf8_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setattr(spaces, "SPACES_DIR", tmp_path)
    (tmp_path / "space.yaml").write_bytes(b"params:\n  lr: \xe9\n")
    with pytest.raises(ConfigError, match=r"^search_spaces/space\.yaml: not a UTF-8 text file \(byte 14\)$"):
        load_registry_space("space")


def test_a_registry_file_reads_1e_minus_4_as_a_float(tmp_path, monkeypatch):
    monkeypatch.setattr(spaces, "SPACES_DIR", tmp_path)
    (tmp_path / "space.yaml").write_text("params:\n  lr: {loguniform: [1e-4, 1e-2]}\n  weight_decay: 5e-4\n")
    specs = load_registry_space("space")
    assert specs == {"lr": ParamSpec("loguniform", (1.0e-4, 1.0e-2)), "weight_decay": ParamSpec("constant", (5.0e-4,))}


# --- inline params over the registry -------------------------------------------------------------
def test_inline_params_override_registry_params_of_the_same_name():
    inline = {"lr": {"uniform": [1.0e-3, 2.0e-3]}, "conv2": 48, "conv1": {"choice": [8, 16]}}
    sweep = SweepConfig.model_validate({"name": "t", "space": {"use": "cnn", "params": inline}})
    specs = sweep.param_specs()
    registry = load_registry_space("cnn")
    assert specs["lr"] == ParamSpec("uniform", (1.0e-3, 2.0e-3))
    assert specs["conv2"] == ParamSpec("constant", (48,))
    assert specs["conv1"] == ParamSpec("choice", (8, 16))  # new, not in the registry space
    for name in set(registry) - set(inline):
        assert specs[name] == registry[name]  # the rest is untouched
    assert list(specs)[: len(registry)] == list(registry)


def test_the_default_experiment_overrides_its_registry_space():
    from tuner.sweepfile.load import load_sweep

    specs = load_sweep("mnist_asha").param_specs()
    assert specs["lr"] == ParamSpec("loguniform", (1.0e-3, 4.0e-3))
    assert specs["hidden"] == ParamSpec("constant", (128,))
    assert specs["dropout"] == load_registry_space("cnn")["dropout"]


def test_a_spec_written_in_yaml_round_trips():
    text = "lr: {loguniform: [1.0e-4, 1.0e-2]}\nhidden: {quniform: [64, 256, 32]}\noptimizer: {choice: [adam, sgd]}\n"
    parsed = {k: parse_param(v) for k, v in yaml.safe_load(text).items()}
    assert parsed == {
        "lr": ParamSpec("loguniform", (1.0e-4, 1.0e-2)),
        "hidden": ParamSpec("quniform", (64, 256, 32)),
        "optimizer": ParamSpec("choice", ("adam", "sgd")),
    }
