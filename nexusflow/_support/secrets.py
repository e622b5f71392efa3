"""Values that must never be written out: ``${VAR}`` expansions, the tokens we mint, and the
values of secret-named variables in the environment a CLI or an agent runs with.

A process-wide registry, because a secret handed to a CLI, an MCP server or an agent can
come back in any text they print, and that text reaches errors, logs and Prefect states
far from where the secret was expanded. ``redact`` replaces every registered value with
``***``; every ``nexusflow`` logger and Prefect's run loggers carry a filter doing the same
as a last line of defence.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from typing import Any

MASK = "***"
MIN_LENGTH = 4
"""Shorter values are not registered: masking every "1" or "yes" would garble the text."""

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
"""An environment variable whose name matches holds a secret, however it was given: set,
``${VAR}``, or inherited from the parent's environment."""
NAMED_MIN_LENGTH = 8
"""A secret-named value shorter than this is a flag or a mode (``TOKENIZERS_PARALLELISM=false``,
``*_AUTH=none``), not a key: masking it would garble every text it occurs in."""

_lock = threading.Lock()
_values: set[str] = set()
_pattern: re.Pattern[str] | None = None


def register(value: str) -> None:
    """From now on, ``value`` is redacted wherever ``redact`` runs: for good, unless it is a
    credential of ours that dies, which ``forget`` takes back."""
    if len(value) < MIN_LENGTH or value in _values:
        return
    with _lock:
        _values.add(value)
        _compile()


def forget(value: str) -> None:
    """``value`` is no longer redacted: for a credential we minted once nothing accepts it
    any more (a served toolkit's token, its server and agent gone). The pattern is an
    alternation of every registered value, tried at each position of every text redacted: a
    process that kept one token per session it ever served redacted ever more slowly (300
    values: 80 ms for 128 KiB, against 0.1 ms for one)."""
    with _lock:
        if value in _values:
            _values.discard(value)
            _compile()


def _compile() -> None:
    global _pattern
    # Longest first, so a secret containing another is masked whole.
    ordered = sorted(_values, key=len, reverse=True)
    _pattern = re.compile("|".join(re.escape(item) for item in ordered)) if ordered else None


def longest() -> int:
    """The length of the longest registered value (0 when none is)."""
    return max(map(len, _values), default=0)


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of ``env``'s secret-named variables that are long enough to be keys."""
    return [value for name, value in env.items() if SECRET_NAME.search(name) and len(value) >= NAMED_MIN_LENGTH]


def register_environment(env: Mapping[str, str]) -> None:
    """Register the secret-named values of the environment a CLI or an agent is started with,
    inherited ones included: the model may echo any of them, into any text we write."""
    for value in secret_values(env):
        register(value)


def redact(text: str) -> str:
    """``text`` with every registered value replaced by ``***``."""
    pattern = _pattern
    return text if pattern is None or not text else pattern.sub(MASK, text)


def redact_all(value: Any) -> Any:
    """``value`` (JSON-ready) with every string in it redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_all(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_all(item) for item in value]
    return value


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


for _name in ("nexusflow", "prefect.flow_runs", "prefect.task_runs"):
    # Prefect's run loggers send each record to the server as it is: what a run logs, and
    # the engine's own lines (a state's message, a task's traceback).
    get_logger(_name)
