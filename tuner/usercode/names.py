"""``module:name`` references to a user's code, imported from its folder and checked.

Every failure is one line that names the reference and what is wrong: the module does
not import (its own error's last line; the traceback is the user's to see by importing
it), the name is not in the module, it is not a function, or its signature cannot take
what tuner passes.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.usercode.snapshot import importable

REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def check_reference(text: str) -> str:
    """``text`` if it reads ``module:name`` (``pkg.module:Class.method`` too), else ValueError."""
    if not REFERENCE.match(text):
        raise ValueError(f"expected 'module:function' (e.g. 'my_models:build'), but got {text!r}")
    return text


def load(reference: str, folder: str | Path | None, *, field: str) -> Callable[..., Any]:
    """The object ``reference`` names, imported with ``folder`` first on the path."""
    module_name, _, attribute = reference.partition(":")
    with importable(folder) if folder is not None else contextlib.nullcontext():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name and module_name.split(".")[0] == error.name.split(".")[0]:
                where = f" in {folder}" if folder is not None else ""
                raise TunerError(f"{field}: {reference!r}: no module {error.name!r}{where}") from None
            raise TunerError(f"{field}: {reference!r} does not import: {_last_line(error)}") from None
        except BaseException as error:  # noqa: BLE001 - the user's module raised anything at all
            if isinstance(error, KeyboardInterrupt):
                raise
            raise TunerError(f"{field}: {reference!r} does not import: {_last_line(error)}") from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            names = sorted(n for n in vars(module) if callable(getattr(module, n)) and not n.startswith("_"))
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            raise TunerError(
                f"{field}: {reference!r}: module {module_name!r} has no {attribute!r} "
                f"(it has: {shown or 'nothing callable'})"
            )
        found = getattr(found, part)
    if not callable(found):
        raise TunerError(f"{field}: {reference!r} is a {type(found).__name__}, not a function")
    return found


def check_takes(
    function: Callable[..., Any], reference: str, *, field: str, positional: int = 0, keywords: Iterable[str] = ()
) -> None:
    """Whether ``function`` can be called with ``positional`` arguments and ``keywords``."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or C function: called and seen
    arguments = [object()] * positional
    try:
        signature.bind(*arguments, **{name: None for name in keywords})
    except TypeError as error:
        raise TunerError(
            f"{field}: {reference!r} has the signature {signature}, which cannot take "
            f"{_what(positional, keywords)}: {error}"
        ) from None


def takes_context(function: Callable[..., Any]) -> bool:
    """Whether a training function is tuner's ``train(params, context)``; else it is Ray Tune's
    ``train(config)`` (a function that can take one positional argument but not two)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(object(), object())
    except TypeError:
        return False
    return True


def accepted_keywords(function: Callable[..., Any], names: Iterable[str]) -> list[str]:
    """Those of ``names`` that ``function`` takes as keywords (all of them with ``**kwargs``), in order."""
    names = list(names)
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return names
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return names
    taken = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [name for name in names if name in taken]


def _what(positional: int, keywords: Iterable[str]) -> str:
    parts = [f"{positional} positional argument{'s' if positional != 1 else ''}"] if positional else []
    keywords = list(keywords)
    if keywords:
        parts.append("the keywords " + ", ".join(keywords))
    return " and ".join(parts) or "no arguments"


def _last_line(error: BaseException) -> str:
    """The last line of the error as Python prints it (``NameError: name 'x' is not defined``)."""
    lines = traceback.format_exception_only(type(error), error)
    return lines[-1].strip() if lines else type(error).__name__
