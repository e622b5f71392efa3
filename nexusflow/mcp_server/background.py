"""The runs of the server's own agent: each a ``nexusflow`` command in a background process
of its own session (a client that kills the server, or its process group, kills no run),
its output in a log under Prefect's home. The server returns once the process holds its
session (its lease beats with the process's id) or has ended."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import anyio

from .._prefect.session_lock import Heartbeat
from .._prefect.storage import read_record
from ..config.settings import settings
from ..ops.background_logs import logs_folder
from .errors import mcp_did_not_start, mcp_too_many_runs

_LOOK_EVERY = 0.2
_SAID = 4096
"""The last characters of a failed start's log quoted in its refusal."""


def log_path(session_id: str, pid: int | str = "*") -> Path:
    """``<PREFECT_HOME>/nexusflow/mcp/<session digest>/<pid>.log``: one file a background
    process, so two started at once never mix their words (``*``: the session's folder glob)."""
    return logs_folder(session_id) / f"{pid}.log"


@dataclass(frozen=True)
class Started:
    process: subprocess.Popen[bytes]
    log: Path


_running: set[subprocess.Popen[bytes]] = set()
_spawning = threading.Lock()


def spawn(session_id: str, argv: list[str]) -> Started:
    """``nexusflow <argv>`` in the background: no stdin, its output in a log of its own,
    reaped by a thread of its own so no zombie stays. At most ``NEXUSFLOW_MCP_MAX_RUNS`` at
    once: a client calling in a loop would otherwise start a Python with Prefect for each."""
    with _spawning:
        _running.difference_update([process for process in _running if process.poll() is not None])
        if len(_running) >= settings().mcp_max_runs:
            raise mcp_too_many_runs(len(_running))
        started = _spawn(session_id, argv)
        _running.add(started.process)
    return started


def _spawn(session_id: str, argv: list[str]) -> Started:
    folder = log_path(session_id).parent
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".starting-", suffix=".log", delete=False) as out:
        out.write(f"nexusflow {argv[0]} (session {session_id}) at {time.strftime('%FT%T%z')}\n".encode())
        out.flush()
        process = subprocess.Popen(
            [sys.executable, "-m", "nexusflow", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    log = log_path(session_id, process.pid)
    os.replace(out.name, log)  # the open descriptor the process writes to follows the rename
    threading.Thread(target=process.wait, name=f"reap-{process.pid}", daemon=True).start()
    return Started(process, log)


async def held_by(started: Started, session_id: str) -> str | None:
    """The flow run the process runs once it holds the session; None when it has not within
    ``NEXUSFLOW_MCP_START_WAIT`` seconds (30; it goes on, and ``get_run`` tells: a cold Python
    with Prefect, and on the embedded default a server of its own, takes seconds, more on a
    loaded machine). A process that ended first (refused, failed, or done before it was
    seen) is a refusal quoting its last words, unless its run went by."""
    process = started.process
    deadline = time.monotonic() + settings().mcp_start_wait
    while time.monotonic() < deadline:
        beat = await read_record(Heartbeat, "sessions", session_id, "lease.json")
        if beat is not None and beat.process is not None and beat.process.pid == process.pid:
            return beat.flow_run_id
        if process.poll() is not None:
            if process.returncode in (0, 3):  # completed, or ended pending, before a look saw it beat
                beat = await read_record(Heartbeat, "sessions", session_id, "lease.json")
                return beat.flow_run_id if beat is not None else None
            raise mcp_did_not_start(session_id, last_words(started.log))
        await anyio.sleep(_LOOK_EVERY)
    return None


def last_words(log: Path) -> str:
    """The command's last word in its log (``nexusflow: error: ...``), else the log's last line."""
    try:
        with open(log, "rb") as read:
            read.seek(max(0, os.fstat(read.fileno()).st_size - _SAID))
            tail = read.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"its log could not be read ({exc})"
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    said = deque((line for line in lines if line.startswith("nexusflow:")), maxlen=1)
    return said[0] if said else lines[-1] if lines else "it said nothing"
