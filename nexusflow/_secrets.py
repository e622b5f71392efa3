"""Values that must never be written out: ``${VAR}`` expansions and the tokens we mint.

A process-wide registry, because a secret handed to a CLI, an MCP server or an agent can
come back in any text they print, and that text reaches errors, logs and Prefect states
far from where the secret was expanded. ``redact`` replaces every registered value with
``***``; every ``nexusflow`` logger carries a filter doing the same as a last line of defence.
"""

from __future__ import annotations

import logging
import re
import threading

MASK = "***"
MIN_LENGTH = 4
"""Shorter values are not registered: masking every "1" or "yes" would garble the text."""

_lock = threading.Lock()
_values: set[str] = set()
_pattern: re.Pattern[str] | None = None


def register(value: str) -> None:
    """From now on, ``value`` is redacted wherever ``redact`` runs (it is never forgotten)."""
    global _pattern
    if len(value) < MIN_LENGTH or value in _values:
        return
    with _lock:
        _values.add(value)
        # Longest first, so a secret containing another is masked whole.
        ordered = sorted(_values, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(item) for item in ordered))


def redact(text: str) -> str:
    """``text`` with every registered value replaced by ``***``."""
    pattern = _pattern
    return text if pattern is None or not text else pattern.sub(MASK, text)


class RedactingFilter(logging.Filter):
    """Formats a record's message (and traceback) once and redacts it, so a handler of any
    kind receives only the redacted text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _pattern is None:
            return True
        record.msg = redact(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_FILTER = RedactingFilter()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with the redacting filter: a logger's filters see only
    records logged to that very logger, so each ``nexusflow`` logger needs its own."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


get_logger("nexusflow")
