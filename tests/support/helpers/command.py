"""The command as a test runs it without a process of its own."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

import anyio
import pytest

if TYPE_CHECKING:
    from prefect.logging.handlers import PrefectConsoleHandler


def nexusflow_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """The command's ``main`` in this process: the parsing, the checks and the messages of the
    console script (``sys.exit(main())``, which the other tests run as a process), without
    paying a Python and a Prefect start-up per case. Its stderr holds Prefect's log lines too,
    as a process's does; ``sys.path`` is left as it was (a ``module:name`` spec puts the
    working directory on it)."""
    from prefect.logging.configuration import ensure_logging_setup

    from nexusflow.command import main

    with capsys.disabled():
        # Prefect sets its console handler up once per process, on the stderr of the moment:
        # this test's capture would be closed when the test ends, and later logs would fail.
        ensure_logging_setup()
    path = list(sys.path)
    try:
        with _prefect_logs_to(sys.stderr):
            code = main(list(args))
    finally:
        sys.path[:] = path
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["nexusflow", *args], code, out, err)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command's stderr, which must be one ``nexusflow: `` line and no traceback when it
    cannot go on: what a user reads, and all a script's log keeps."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = done.stderr.splitlines()
    assert line.startswith("nexusflow: "), line
    return line


async def nexusflow_here_awaited(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``nexusflow_here`` from an async test: in a worker thread, since ``main`` runs an event
    loop of its own."""
    return await anyio.to_thread.run_sync(nexusflow_here, capsys, *args)


@contextmanager
def _prefect_logs_to(stream: TextIO) -> Iterator[None]:
    """Prefect's console handlers write to ``stream`` for the call only."""
    handlers = _prefect_console_handlers()
    before = [(handler.stream, handler.console.file) for handler in handlers]
    for handler in handlers:
        handler.setStream(stream)
        handler.console.file = stream
    try:
        yield
    finally:
        for handler, (old, file) in zip(handlers, before, strict=True):
            handler.setStream(old)
            handler.console.file = file


def _prefect_console_handlers() -> list[PrefectConsoleHandler]:
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    found = {
        id(handler): handler
        for logger in loggers
        if isinstance(logger, logging.Logger)
        for handler in logger.handlers
        if isinstance(handler, PrefectConsoleHandler)
    }
    return list(found.values())
