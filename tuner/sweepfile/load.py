"""Loading a sweep file: a bare name looked up in ``experiments/``, ``--set`` overrides,
``--smoke``, validation, and pydantic's errors turned into one ``file:line: field: ...``
line each; the JSON Schema editors read."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tuner.errors import ConfigError
from tuner.sweepfile.checks import lower_first
from tuner.sweepfile.schema import SweepConfig
from tuner.sweepfile.sections import MODEL_TAGS, OpenOptions, searchable_params
from tuner.usercode.shipped import submitted_file
from tuner.yamlio import LoadedYaml, load_yaml, parse_scalar

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "experiments"


def resolve_sweep_path(name_or_path: str) -> Path:
    """A path as given, or a bare name looked up in ``experiments/`` (``.yaml`` optional)."""
    submitted = submitted_file(name_or_path)  # a submitted job runs the file it was given
    if submitted is not None:
        return submitted
    path = Path(name_or_path)
    if path.exists() or path.parent != Path("."):
        return path
    for candidate in (EXPERIMENTS_DIR / name_or_path, EXPERIMENTS_DIR / f"{name_or_path}.yaml"):
        if candidate.is_file():
            return candidate
    return path


def apply_overrides(data: dict[str, Any], overrides: list[str], *, file: str) -> dict[str, Any]:
    """``--set a.b=value`` overrides; the value is parsed as YAML (``1e-3``, ``[1, 2]``)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", key):
            raise ConfigError(f"--set {item!r}: expected key.path=value", file=file)
        node = data
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part} is not a section", file=file)
        try:
            node[last] = parse_scalar(raw)
        except ConfigError as error:
            raise ConfigError(f"--set {item!r}: {error.reason}", file=file) from None
    return data


SMOKE_OVERRIDES = [
    "data.train_subset=2000",
    "data.test_subset=2000",
    "train.epochs=2",
    "trials.num_samples=2",
    "trials.time_budget_s=null",
    "tracking.mlflow.registry=false",
]


def smoke_overrides(data: dict[str, Any]) -> list[str]:
    """--smoke's overrides for a sweep file's data: a user's function or command without a
    data section gets none (a data override would give it a data set it never asked for)."""
    own = "trainable" in data or "command" in data
    if own and "data" not in data:
        return [item for item in SMOKE_OVERRIDES if not item.startswith("data.")]
    return SMOKE_OVERRIDES


def json_schema() -> dict[str, Any]:
    """The sweep file's JSON Schema, from the models that validate it: for editors (the
    YAML language server completes and checks a file while it is typed)."""
    schema = SweepConfig.model_json_schema()
    # As written in a file: metric and mode may be lists (several objectives), which the
    # model turns into metric/mode + objectives before its fields see them.
    properties = schema["properties"]
    properties["metric"] = {"anyOf": [properties["metric"], {"type": "array", "items": {"type": "string"}}]}
    properties["mode"] = {"anyOf": [properties["mode"], {"type": "array", "items": {"enum": ["max", "min"]}}]}
    # The model itself as a choice, each model with its options (checked by the loader, per model).
    choice_of_models = {
        "type": "object",
        "properties": {
            "name": {
                "type": "object",
                "properties": {
                    "choice": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "object"}}
                },
                "required": ["choice"],
                "additionalProperties": False,
            }
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    properties["model"] = {"anyOf": [properties["model"], choice_of_models]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tuner sweep file",
        "description": "A tuner sweep: python -m tuner sweep FILE",
        **{key: value for key, value in schema.items() if key != "title"},
    }


def load_sweep(
    name_or_path: str, overrides: list[str] | None = None, *, smoke: bool = False, import_code: bool = True
) -> SweepConfig:
    """Read, override and validate a sweep file. Raises ConfigError, never starts Ray.
    ``import_code``: import and check the user's code it names (not to read a finished sweep)."""
    path = resolve_sweep_path(name_or_path)
    loaded = load_yaml(path, display_name=str(path))
    if not isinstance(loaded.data, dict):
        raise ConfigError(
            f"a sweep file is a mapping of sections, but got {type(loaded.data).__name__}",
            file=loaded.file,
            line=1,
        )
    data = dict(loaded.data)
    data.setdefault("name", path.stem)
    if smoke:
        data = apply_overrides(data, smoke_overrides(data), file=loaded.file)
        _smoke_fit(data)
    data = apply_overrides(data, overrides or [], file=loaded.file)
    try:
        sweep = validate(data, loaded, import_code=False)
        _check_added_params(sweep, loaded, overrides or [])  # a typo, before the user's code is asked
        if not import_code:
            return sweep
        from tuner.sweepfile import own_code

        return own_code.check(sweep, loaded)
    except ConfigError as error:
        raise _said_against_override(error, overrides or [], loaded.file) from None


def _said_against_override(error: ConfigError, overrides: list[str], file: str) -> ConfigError:
    """An error about a key a ``--set`` gave names that ``--set``, not a line of the file."""
    head = error.reason.split(":", 1)[0].strip()
    if error.file != file or not re.fullmatch(r"[\w.]+", head):
        return error
    path = head.split(".")
    for item in reversed(overrides):  # the last --set of a key is the one that counts
        key = item.partition("=")[0].split(".")
        if path[: len(key)] == key:
            return ConfigError(f"--set {item!r}: {error.reason}", file=file)
    return error


def _check_added_params(sweep: SweepConfig, loaded: LoadedYaml, overrides: list[str]) -> None:
    """A ``--set space.params.NAME`` the file does not have, where nothing checks the name (a
    user's function or command, a builder's options), is a typo when NAME is all but one the
    sweep already has (``batchsize`` for ``batch_size``): refused with the name it meant."""
    if not (sweep.own_loop or isinstance(sweep.model, OpenOptions)):
        return  # every name is checked against the model's hyperparameters (_check_space)
    added = {}
    for item in overrides:
        key = item.partition("=")[0].split(".")
        if len(key) == 3 and key[:2] == ["space", "params"] and ("space", "params", key[2]) not in loaded.lines:
            added[key[2]] = item
    known = set(sweep.flat_specs()) - set(added)
    if not sweep.own_loop:
        known |= set(searchable_params(sweep.model))
    for name, item in added.items():
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.85)
        if close:
            raise ConfigError(
                f"--set {item!r}: space.params.{name}: the sweep has no hyperparameter {name!r}; did you mean "
                f"{close[0]!r}? (a new one with a name that close goes in the file's space.params)",
                file=loaded.file,
            )


def _smoke_fit(data: dict[str, Any]) -> None:
    """Keep a smoke run valid: a grace period cannot exceed the 2 smoke epochs."""
    scheduler = data.get("scheduler")
    if isinstance(scheduler, dict) and isinstance(scheduler.get("grace_period"), int):
        scheduler["grace_period"] = min(scheduler["grace_period"], 1)


def validate(data: dict[str, Any], loaded: LoadedYaml, *, import_code: bool = True) -> SweepConfig:
    try:
        sweep = SweepConfig.model_validate(data, strict=True)  # YAML types as written: no "3" -> 3
    except ValidationError as error:
        raise _to_config_error(error, data, loaded) from None
    sweep._origin = loaded
    if not import_code:
        return sweep
    from tuner.sweepfile import own_code

    return own_code.check(sweep, loaded)


def _to_config_error(error: ValidationError, data: Any, loaded: LoadedYaml) -> ConfigError:
    errors = error.errors()
    first = errors[0]
    path = _data_path(data, first["loc"])
    alternatives = [
        e["msg"]
        for e in errors[1:]
        if _data_path(data, e["loc"]) == path
        and e["type"] == first["type"]
        or _data_path(data, e["loc"]) == path
        and first["type"] not in ("unknown_key", "sweep_check")
    ]
    kind, ctx = first["type"], first.get("ctx", {})
    if kind == "unknown_key":
        path = (*path, ctx["key"])
        message = first["msg"]
    elif kind == "union_tag_invalid":
        section = path[-1] if path else "value"
        valid = ctx.get("expected_tags", "").replace("'", "")
        if section == "model":
            valid = "cnn, resnet18, resnet34, synthetic, torchvision:<builder> (e.g. torchvision:resnet50)"
        message = f"unknown {section} {ctx.get('tag')!r}; choose one of: {valid}"
        path = (*path, "name")
    elif kind == "value_error" and isinstance(ctx.get("error"), ConfigError):
        return ctx["error"]
    elif kind == "sweep_check":
        return ConfigError(first["msg"], file=loaded.file, line=loaded.line_of_message(first["msg"]))
    elif kind == "missing":
        message = "required, but missing"
    else:
        accepted = " or ".join(dict.fromkeys(lower_first(m) for m in [first["msg"], *alternatives]))
        message = f"{accepted}, but got {first.get('input')!r}"
    dotted = ".".join(str(p) for p in path) or "(top level)"
    return ConfigError(f"{dotted}: {message}", file=loaded.file, line=loaded.line_of(path))


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Pydantic's error location without union tags: the path into the YAML data."""
    path: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
        elif isinstance(part, str) and (
            isinstance(node, dict) and node.get("name") == part or part.startswith("function-") or part in MODEL_TAGS
        ):
            continue  # a discriminator tag or validator frame, not a key
        elif node is not data and not isinstance(node, (dict, list)) and path:
            break  # at a scalar: what follows names union members (``literal['auto']``, ``bool``)
        else:
            path.append(part)
            node = None
    return tuple(path)
