"""Safe YAML loading that remembers where each key was, for errors with line numbers."""

from __future__ import annotations

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


def _record_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key_path = (*path, key_node.value)
            lines[key_path] = key_node.start_mark.line + 1
            _record_lines(value_node, key_path, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_lines(item, (*path, index), lines)


def load_yaml(path: Path, *, display_name: str | None = None) -> LoadedYaml:
    """Parse ``path`` with the safe loader only (no Python object tags).

    Raises ConfigError for a missing, empty or non-YAML file, and for any tag that
    would construct a Python object.
    """
    name = display_name or str(path)
    if not path.is_file():
        raise ConfigError("no such file", file=name)
    text = path.read_text(encoding="utf-8")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ConfigError("the file is empty", file=name)
        data = loader.construct_document(node)
    except yaml.constructor.ConstructorError as error:
        line = error.problem_mark.line + 1 if error.problem_mark else None
        tag = getattr(error, "problem", "") or str(error)
        raise ConfigError(
            f"unsafe or unknown YAML tag refused ({tag.strip()}); only plain YAML is read",
            file=name,
            line=line,
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise ConfigError(
            f"not valid YAML: {problem}", file=name, line=mark.line + 1 if mark else None
        ) from None
    finally:
        loader.dispose()
    lines: dict[Path_, int] = {}
    _record_lines(node, (), lines)
    return LoadedYaml(data=data, file=name, lines=lines)
