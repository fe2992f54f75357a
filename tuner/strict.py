"""The base of every section of the sweep file: unknown keys are errors with a did-you-mean,
and the errors a check raises carry a message formatted here (pydantic's templates know
no ``!r``). Below every package that declares a section (search, data, sweepfile)."""

from __future__ import annotations

import difflib
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError


class Strict(BaseModel):
    """Base for every section: unknown keys are errors with a did-you-mean."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    open_options: ClassVar[bool] = False  # OpenOptions: keys besides the fields are options

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and not cls.open_options:
            valid = sorted(cls.model_fields)
            for key in data:
                if key not in cls.model_fields:
                    close = difflib.get_close_matches(str(key), valid, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise custom(
                        "unknown_key",
                        "unknown key {key!r}{hint} (valid keys: {valid})",
                        key=key,
                        hint=hint,
                        valid=", ".join(valid),
                    )
        return data


def custom(kind: str, message: str, **ctx: Any) -> PydanticCustomError:
    """A pydantic error with a message formatted here (pydantic's templates know no ``!r``)."""
    text = message.format(**ctx)
    return PydanticCustomError(kind, "{text}", {"text": text, **ctx})


def fail(message: str, **ctx: Any) -> PydanticCustomError:
    """A cross-check's error: ``field.path: what is wrong``, placed at its line by the loader."""
    return custom("sweep_check", message, **ctx)
