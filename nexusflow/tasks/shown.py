"""What a task run's page shows of a value: Prefect's run logger sends log lines and state
messages to the server as they are, so they are redacted here, and cut to a length a page
can hold (a tool may return megabytes)."""

from __future__ import annotations

from .._support.secrets import redact

LIMIT = 2000


def shown(text: str, limit: int = LIMIT) -> str:
    """``text`` redacted, then cut at ``limit`` characters with its full length appended."""
    text = redact(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"
