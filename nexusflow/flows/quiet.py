"""An expected failure is one line: Prefect's run loggers keep tracebacks for bugs only.

Prefect's task engine logs a task that raised at ERROR with its traceback ("Task run failed
with exception ..."), its flow engine logs a flow that raised the same way ("Encountered
exception during execution"), and both close a run that did not complete with "Finished in
state Failed(...)" at ERROR. For a run that failed with an outcome it can meet (a login
missing, a quota spent, a timeout, a busy session: ``NexusflowError.expected``) that is
thirty lines before the one that matters, on the console and in the UI's logs.

Why a filter on Prefect's run loggers (``prefect.task_runs``, ``prefect.flow_runs``) and not
a task that returns a ``Failed`` state instead of raising: the engine logs a returned failure
at ERROR too ("Task run failed with state", then "Finished in state Failed"), and a flow
that returns ``Failed`` still gets "Finished in state Failed" at ERROR; only a filter sees
every such record, on every path (the command, ``client.run``, ``run_sync``, a user's own
flow, ``agent_job`` on a worker), without changing what the engines do: states, results and
events stay exactly as they were. It is keyed on the exception a record carries, never on
its words: a record whose exception is an expected failure marks its run, and that run's
closing "Finished in state" line goes with it; a flow that fails without raising
(``agent_run`` returns its ``Failed`` state) marks itself with ``failed_quietly``.

Such a record reaches no console (the command prints its one line, ``nexusflow: error: ...``;
Python has the result's error and the run's state message): it goes to the run logger's own
handlers only (Prefect's API handler: the UI's logs), at INFO and without a traceback.
``NEXUSFLOW_DEBUG=1`` (``nexusflow --debug``) turns it off: every record as Prefect logs it."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from .._prefect.logs import FINISHED, FLOW_RUNS, TASK_RUNS, add_filter
from ..config.settings import settings
from ..errors import ArgumentError, NexusflowError, unwrap

RUN_LOGGERS = (TASK_RUNS, FLOW_RUNS)
"""Where Prefect's engines log about a run (each record names its run: ``task_run_id``,
``flow_run_id``)."""
UI_ONLY: dict[str, Any] = {"nexusflow_ui_only": True}
"""``extra=`` of a record of ours that goes to the run's logs in the UI, not the console."""
_REMEMBERED = 1024
"""Runs marked at once, at most: a mark whose closing line never came (a run that was cut
short) is forgotten once this many came after it."""


def expected(exc: BaseException) -> bool:
    """An outcome the run can meet, said in one line: never a bug's exception."""
    error = unwrap(exc)
    return isinstance(error, NexusflowError) and error.expected


def debugging() -> bool:
    """``NEXUSFLOW_DEBUG`` (``nexusflow --debug``): every traceback as Prefect logs it. A bad
    ``NEXUSFLOW_*`` value is refused where a client is made, not inside a log call."""
    try:
        return settings().debug
    except ArgumentError:
        return False


class _Quiet(logging.Filter):
    """Sends an expected failure's records to the API only, at INFO, without traceback."""

    def __init__(self) -> None:
        super().__init__()
        self._marked: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def mark(self, run: str) -> None:
        with self._lock:
            self._marked[run] = None
            while len(self._marked) > _REMEMBERED:
                self._marked.popitem(last=False)

    def _closes_a_marked_run(self, run: str, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(FINISHED):
            return False
        with self._lock:
            if run not in self._marked:
                return False
            del self._marked[run]
            return True

    def filter(self, record: logging.LogRecord) -> bool:
        ours = getattr(record, "nexusflow_ui_only", False)
        if record.levelno <= logging.INFO and not ours:
            return True
        run = getattr(record, "task_run_id", None) or getattr(record, "flow_run_id", None)
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and expected(error) and run is not None:
            self.mark(str(run))
        elif not ours and (run is None or not self._closes_a_marked_run(str(run), record)):
            return True
        if debugging():
            return True
        if not ours:
            record.levelno, record.levelname = logging.INFO, "INFO"
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        for handler in logging.getLogger(record.name).handlers:
            if record.levelno >= handler.level:
                handler.handle(record)
        return False


_QUIET = _Quiet()


def failed_quietly(flow_run_id: str) -> None:
    """The flow run ends ``Failed`` with an expected failure it did not raise: its closing
    line goes as an expected failure's records do."""
    _QUIET.mark(flow_run_id)


add_filter(_QUIET, *RUN_LOGGERS)
