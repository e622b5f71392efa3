"""A new user's environment and ``nexusflow server`` as they run it, for the tests of which
server a process uses. Imports nothing from Prefect."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from helpers.servers import free_port

NOISE = re.compile(r"Traceback|\bERROR\b|\bWARNING\b")
"""What a quiet default never prints: a line that matches is a user's bug report."""

RECOVERED = re.compile(
    r"\| prefect\.server\.services\.\w+ - Error flushing \d+ events \(\d+ to retry, 0 dropped\)$"
    r"|\| prefect\.server\.utilities\.worker_channel - Worker channel heartbeat persistence failed: "
)
"""Not noise of ours: Prefect's server on a busy SQLite, on a loaded machine, logging an error
with its traceback that it recovers from. Its event recorder, its batch refused, retries:
nothing is lost (CI, 2026-12-05: the README's first run while three test workers ran beside
it). A worker's heartbeat it could not write (``database is locked``) closes that worker's
channel as retryable (``WorkerChannelCloseReason.HEARTBEAT_PERSISTENCE_FAILED``), and the
worker connects again and goes on (tests/homes/test_night.py, 2026-12-06, two nights at once beside
other engineers' tests)."""

RECOVERED_WHEN_LOCKED = re.compile(r"\| prefect\.server - Encountered error during state validation$")
"""Recovered only when its traceback says ``database is locked``: a state change that met
another writer on SQLite, which Prefect retries. Its late-runs service reads a due run, then
writes its Late state, in a transaction that SQLite cannot turn into a write once another
connection wrote in between (busy at once, whatever the busy timeout); its next look, 5 s
later, marks the run (CI, 2026-12-07: test_night's run of a pool without a worker, marked
Late while the watch marked the killed run Crashed). The API's own state changes answer 503,
and the client sends them again."""

LOCKED = "database is locked"

RECORD = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| ")
"""The start of a log record on Prefect's console: what ends the traceback of the one before."""


def new_user_environment(home: Path | str) -> dict[str, str]:
    """What a new user has: no API URL (the embedded server), no opt-out of telemetry, a
    fresh PREFECT_HOME; a port of its own, so a server someone runs on 4200 is not found."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PREFECT_")}
    env.pop("DO_NOT_TRACK", None)
    env.update({"PREFECT_HOME": str(home), "PREFECT_SERVER_API_PORT": str(free_port())})
    return env


def noise(output: str) -> list[str]:
    """The noisy lines of ``output``, a recovered record and its traceback left out."""
    noisy: list[str] = []
    for record in _records(output):
        head = record[0]
        recovered = bool(RECORD.match(head)) and (
            bool(RECOVERED.search(head))
            or (bool(RECOVERED_WHEN_LOCKED.search(head)) and any(LOCKED in line for line in record[1:]))
        )
        if not recovered:
            noisy += [line for line in record if NOISE.search(line)]
    return noisy


def _records(output: str) -> list[list[str]]:
    """``output``'s lines by log record: a record's line and what follows it up to the next
    (its traceback); the lines before the first record are one of their own."""
    records: list[list[str]] = [[]]
    for line in output.splitlines():
        if RECORD.match(line):
            records.append([])
        records[-1].append(line)
    return [record for record in records if record]


def loud(output: str, keep: int = 6000) -> str:
    """Each noisy record of ``output`` whole, its traceback to the end (the exception a failed
    ``noise`` assertion is about: a tail of the output may not hold it), the last ``keep``
    characters of them."""
    noisy = ["\n".join(record) for record in _records(output) if noise("\n".join(record))]
    return "\n".join(noisy)[-keep:] or output[-keep:]


@contextlib.contextmanager
def nexusflow_server(env: dict[str, str], log: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``nexusflow server`` in its own process group, its stderr in ``log`` (``served`` waits
    for its URL). Stopped (SIGTERM, then the group killed) when the block ends, unless the
    test stopped it."""
    with open(log, "w") as errors:
        server = subprocess.Popen(
            [sys.executable, "-m", "nexusflow", "server", *args],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=env,
            start_new_session=True,
        )
    try:
        yield server
    finally:
        if server.poll() is None:
            server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):  # its Prefect server, if it lingers
            os.killpg(server.pid, signal.SIGKILL)
        server.communicate()


def served(server: subprocess.Popen[str]) -> str:
    """The API URL a starting ``nexusflow server`` prints once it answers."""
    assert server.stdout is not None
    line = server.stdout.readline()
    assert line.startswith("export PREFECT_API_URL="), f"nexusflow server said {line!r}"
    return line.strip().removeprefix("export PREFECT_API_URL=")
