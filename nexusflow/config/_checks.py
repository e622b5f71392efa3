"""What public entry points check where they are given it: a wrong type or value fails at
the call that took it, in one line naming the argument (``ArgumentError``), not in a run."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import ArgumentError, SessionIdError
from .errors import argument_wrong, option_refused, option_unknown

Model = TypeVar("Model", bound=BaseModel)


def text(where: str, argument: str, value: object) -> str:
    if not isinstance(value, str):
        raise argument_wrong(where, argument, "text (a str)", value)
    return value


def optional_text(where: str, argument: str, value: object) -> str | None:
    return None if value is None else text(where, argument, value)


def texts(where: str, argument: str, values: object) -> list[str]:
    """A list (any iterable) of strings; a string itself is refused, not read letter by letter."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise argument_wrong(where, argument, "a list of str", values)
    return [text(where, f"{argument}[{index}]", value) for index, value in enumerate(values)]


def function(where: str, argument: str, value: object) -> Callable[..., Any]:
    if not callable(value):
        raise argument_wrong(where, argument, "callable (a function, or an object with __call__)", value)
    return value


def sequence(where: str, argument: str, values: object) -> list[Any]:
    """The items of a list (any iterable but a string or a mapping)."""
    if isinstance(values, str | bytes | dict) or not isinstance(values, Iterable):
        raise argument_wrong(where, argument, "a list", values)
    return list(values)


def build(where: str, kind: type[Model], /, **fields: Any) -> Model:
    """``kind(**fields)``, a refusal as one line naming the option."""
    try:
        return kind(**fields)
    except ValidationError as exc:
        cause = exc.errors()[0].get("ctx", {}).get("error")
        if isinstance(cause, ArgumentError):  # a validator's own refusal (a NEXUSFLOW_* variable) reads as it is
            raise cause from None
        raise refusal(where, exc, list(kind.model_fields)) from None


def refusal(where: str, exc: ValidationError, known: list[str]) -> ArgumentError:
    """Pydantic's report (several lines, naming the model rather than the call) as one line
    naming the option."""
    first = exc.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "options"
    if first["type"] == "extra_forbidden":
        return option_unknown(where, location, known)
    return option_refused(where, location, first["msg"][:1].lower() + first["msg"][1:], first.get("input"))


_SESSION_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
"""Applied with ``fullmatch``: ``$`` would let a final newline through."""


def check_session_id(session_id: str, where: str = "run", argument: str = "session_id") -> str:
    """Session ids become storage paths, so they are checked before anything runs."""
    text(where, argument, session_id)
    if not _SESSION_ID.fullmatch(session_id) or session_id in (".", ".."):
        raise SessionIdError(session_id)
    return session_id
