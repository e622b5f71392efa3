"""What a task run's page shows of a value: Prefect's run logger sends log lines and state
messages to the server as they are, so they are redacted here, and cut to a length a page
can hold (a tool may return megabytes).

A step's own lines (a turn's calls and cost, a tool call's arguments and result) go to the
page, through the Prefect API, and not to the terminal: printing them through Prefect's
console handler (Rich, with its highlighter) cost three times what sending them did, about
a fifth of the loop's CPU with an instant model. To see them in a terminal too::

    logging.getLogger("nexusflow.steps").propagate = True
"""

from __future__ import annotations

import logging

from prefect import get_run_logger
from prefect.logging.handlers import APILogHandler
from prefect.logging.loggers import PrefectLogAdapter

from .._secrets import get_logger, redact

_steps = get_logger("nexusflow.steps")
_steps.propagate = False
_steps.addHandler(APILogHandler())

LIMIT = 2000


def shown(text: str, limit: int = LIMIT) -> str:
    """``text`` redacted, then cut at ``limit`` characters with its full length appended."""
    text = redact(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def step_logger() -> logging.LoggerAdapter[logging.Logger]:
    """The current task run's logger for its step lines: to the API only, at the level the
    run logger has (``PREFECT_LOGGING_LEVEL``)."""
    run = get_run_logger()
    assert isinstance(run, logging.LoggerAdapter), "called inside a task run"
    _steps.setLevel(run.logger.getEffectiveLevel())
    return PrefectLogAdapter(_steps, run.extra)
