"""``${VAR}`` expansion for configured values (MCP servers, CLI environments).

Expansion happens when a value is used, never when a config is read, and expanded values
are never stored on a model or logged: a secret lives only in the call that needs it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from .errors import MissingVariableError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(value: str, secrets: set[str] | None = None) -> str:
    """Replace ``${VAR}`` (or ``${VAR:-default}``) from the environment; a variable that is
    unset and has no default is an error naming it (and never its neighbours' values).
    Values taken from the environment are added to ``secrets``, for ``redact``."""

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            if secrets is not None:
                secrets.add(os.environ[name])
            return os.environ[name]
        if default is not None:
            return default
        raise MissingVariableError(name)

    return _VAR.sub(substitute, value)


def expand_all(values: Mapping[str, str], secrets: set[str] | None = None) -> dict[str, str]:
    return {key: expand(value, secrets) for key, value in values.items()}


def redact(text: str, secrets: set[str]) -> str:
    """Hide expanded values in a message that may quote them (a URL in a connection error).
    Values shorter than four characters are left alone: masking them would garble the text."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text
