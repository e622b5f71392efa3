"""A run that holds its session while its tool waits for a gate, SIGKILLed, and the rerun of
its session: what the tests of honest states do on the session's server
(tests/server/run/test_honest_states.py) and on homes of their own
(tests/homes/test_honest_states_own_servers.py); and the line a take-over marks it with."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from paths import HELPERS

CRASHED_BY_TAKE_OVER = re.compile(
    r'^nexusflow: session "(?P<s>[^"]+)": its process \d+ on this machine died; found by the take-over$'
)


SLOW_TOOL = '''
import time
from nexusflow import tool

@tool
def wait(seconds: float) -> str:
    """Wait."""
    time.sleep(seconds)
    return "waited"
'''
"""A tools file: ``wait`` sleeps as long as it is asked, so a run sits in its tool."""


def hold(
    session_id: str, logs: Path, gate: Path, env: dict[str, str], prefix: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    """A run that holds its session while its tool (``charge``, in turn 0) waits for ``gate``."""
    logs.mkdir()
    holder = subprocess.Popen(
        [*prefix, sys.executable, str(HELPERS / "durable_run.py"), session_id, str(logs), "--hold-until", str(gate)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    deadline = time.monotonic() + 180
    while not (logs / "holding").exists():
        assert holder.poll() is None, holder.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the holder never reached its tool"
        time.sleep(0.2)
    return holder


def kill(holder: subprocess.Popen[str]) -> None:
    os.killpg(holder.pid, signal.SIGKILL)
    holder.communicate(timeout=60)


def rerun(session_id: str, logs: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    logs.mkdir()
    return subprocess.run(
        [sys.executable, str(HELPERS / "durable_run.py"), session_id, str(logs)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
