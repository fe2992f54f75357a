"""Safe YAML loading that remembers where each key was, for errors with line numbers."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import ConfigError

Path_ = tuple[Any, ...]


@dataclass
class LoadedYaml:
    """A parsed document plus the 1-based line of every key path in it."""

    data: Any
    file: str
    lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int | None:
        """The line of the longest prefix of ``path`` that the document has."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def line_of_message(self, message: str) -> int | None:
        """The line of the field path a cross-field message starts with (``a.b.c: ...``)."""
        for head in message.split(":", 1)[0].split(" / "):
            head = head.strip()
            if re.fullmatch(r"[\w.]+\[\d+\]", head):  # a list's item: constraints[1]
                name, index = head[:-1].split("[")
                path = (*name.split("."), int(index))
                return self.lines.get(path, self.line_of(path))
            if re.fullmatch(r"[\w.]+", head) and tuple(head.split(".")) in self.lines:
                return self.lines[tuple(head.split("."))]
        head = message.split(":", 1)[0].split(" / ")[0].strip()
        return self.line_of(tuple(head.split("."))) if re.fullmatch(r"[\w.]+", head) else None


class _Loader(yaml.SafeLoader):
    """The safe loader, reading ``1e-3`` as a float as YAML 1.2 does (PyYAML wants ``1.0e-3``)."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_scalar(text: str) -> Any:
    """A YAML value on its own (``--set`` overrides), read like a sweep file's values."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(text)
    try:
        return load_yaml(Path(handle.name), display_name="--set value").data
    finally:
        os.unlink(handle.name)


def _record_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int], seen: set[int], file: str) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if id(node) in seen:  # an alias: its lines were recorded where it was defined
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: dict[Any, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if isinstance(key_node, yaml.ScalarNode) and key_node.value in keys and key_node.value != "<<":
                dotted = ".".join(map(str, (*path, key_node.value)))
                raise ConfigError(
                    f"{dotted}: duplicate key (first at line {keys[key_node.value]})", file=file, line=line
                )
            if isinstance(key_node, yaml.ScalarNode):
                keys[key_node.value] = line
            key_path = (*path, key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value))
            lines[key_path] = line
            _record_lines(value_node, key_path, lines, seen, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_lines(item, (*path, index), lines, seen, file)


def load_yaml(path: Path, *, display_name: str | None = None) -> LoadedYaml:
    """Parse ``path`` with the safe loader only (no Python object tags).

    Raises ConfigError for a missing, empty or non-YAML file, and for any tag that
    would construct a Python object.
    """
    name = display_name or str(path)
    if not path.is_file():
        raise ConfigError("no such file", file=name)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"not a UTF-8 text file (byte {error.start})", file=name) from None
    loader = _Loader(text)
    lines: dict[Path_, int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            raise ConfigError("the file is empty", file=name)
        # Lines (and duplicate keys) from the node tree as written, before merge keys
        # (<<: *base) are flattened into it by construction.
        _record_lines(node, (), lines, set(), name)
        data = loader.construct_document(node)
    except yaml.constructor.ConstructorError as error:
        line = error.problem_mark.line + 1 if error.problem_mark else None
        problem = (getattr(error, "problem", "") or str(error)).strip()
        if "constructor for the tag" in problem:
            message = f"YAML tag refused ({problem}); only plain YAML is read, no Python objects"
        else:
            message = f"not valid here: {problem}"
        raise ConfigError(message, file=name, line=line) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise ConfigError(f"not valid YAML: {problem}", file=name, line=mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()
    return LoadedYaml(data=data, file=name, lines=lines)
