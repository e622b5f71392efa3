"""``retry_on``: the patterns that make a CLI's or an ACP agent's failure a
``TransientError`` (a rate limit, an overloaded model), shared by both transports."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .errors import cli_retry_pattern


def retry_patterns(patterns: str | Sequence[str]) -> tuple[str, ...]:
    """``retry_on`` checked when the client is built, so a typo fails then and not at the
    first error it should have matched; one string is one pattern."""
    listed = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    for pattern in listed:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise cli_retry_pattern(pattern, str(exc)) from None
    return listed


def retry_matches(patterns: tuple[str, ...], message: str) -> bool:
    """Whether a failure's message (what the CLI or agent said, quoted in it) matches one of
    the patterns, searched anywhere in it and ignoring case."""
    return any(re.search(pattern, message, re.IGNORECASE) for pattern in patterns)
