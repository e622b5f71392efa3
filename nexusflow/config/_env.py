"""``${VAR}`` expansion for configured values (MCP servers, CLI environments).

Expansion happens when a value is used, never when a config is read, and expanded values
are never stored on a model or logged: a secret lives only in the call that needs it, and
every value taken from the environment is registered for redaction (``_secrets``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from .._support.secrets import register
from ..errors import MissingVariableError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(value: str) -> str:
    """Replace ``${VAR}`` (or ``${VAR:-default}``) from the environment; a variable that is
    unset and has no default is an error naming it (and never its neighbours' values).
    Values taken from the environment are registered, so whatever echoes them is redacted."""

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            register(os.environ[name])
            return os.environ[name]
        if default is not None:
            return default
        raise MissingVariableError(name)

    return _VAR.sub(substitute, value)


def expand_all(values: Mapping[str, str]) -> dict[str, str]:
    return {key: expand(value) for key, value in values.items()}
