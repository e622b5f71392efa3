"""Every fault ends in an honest Prefect state (issue 42). A run whose process was SIGKILLed
mid-tool reads ``Crashed`` once anything learns it died (the take-over, ``nexusflow sessions``),
with its in-flight task run, and a pinned message saying how it was found; ``nexusflow show``
no longer lists it as running. A run the user interrupts (SIGINT to the process group, as a
terminal's Ctrl-C; SIGTERM to the process, as ``kill`` or a worker's cancel) ends
``Cancelled``, with one line and no ERROR, and its session goes on from its finished steps.
On d56091b the killed run stayed RUNNING and the interrupted one ended Crashed with four
``Crash detected!`` ERROR lines. Here on the session's server; on the embedded default and a
``nexusflow server`` of their own: tests/homes/test_honest_states_own_servers.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterName
from prefect.utilities.asyncutils import run_coro_as_sync

from helpers.held_runs import CRASHED_BY_TAKE_OVER, SLOW_TOOL, hold, kill, rerun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


async def _runs(session_id: str) -> list[dict[str, Any]]:
    """The session's flow runs, oldest first, each with its task runs' names and states."""
    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[f"agent-{session_id}"]))
        )
        found = []
        for run in sorted(runs, key=lambda run: run.created or 0):
            tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
            assert run.state is not None
            found.append(
                {
                    "id": str(run.id),
                    "state": run.state.type.value,
                    "message": run.state.message,
                    "tasks": {task.name: (task.state.type.value if task.state else None) for task in tasks},
                }
            )
    return found


def runs_of(session_id: str) -> list[dict[str, Any]]:
    return run_coro_as_sync(_runs(session_id))


def _until(session_id: str, check: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """The session's runs once ``check`` holds (task run states reach the server as events,
    recorded a moment later), or the last seen after a minute."""
    deadline = time.monotonic() + 60
    while not ((found := runs_of(session_id)) and check(found)) and time.monotonic() < deadline:
        time.sleep(0.3)
    return found


def test_a_killed_run_is_crashed_by_the_take_over_on_a_server(tmp_path, session_id, capsys):
    gate = tmp_path / "gate"
    holder = hold(session_id, tmp_path / "held", gate, dict(os.environ))
    (killed,) = _until(session_id, lambda runs: runs[-1]["tasks"].get("tool-0-charge") == "RUNNING")
    assert killed["state"] == "RUNNING"
    kill(holder)
    gate.touch()
    again = rerun(session_id, tmp_path / "again", dict(os.environ))
    assert again.returncode == 0 and '"completed"' in again.stdout.splitlines()[-1], again.stderr[-3000:]
    first, second = _until(session_id, lambda runs: len(runs) == 2 and "RUNNING" not in runs[0]["tasks"].values())
    assert first["id"] == killed["id"] and second["state"] == "COMPLETED"
    assert first["state"] == "CRASHED", first
    match = CRASHED_BY_TAKE_OVER.match(first["message"] or "")
    assert match and match["s"] == session_id, first["message"]
    assert first["tasks"]["tool-0-charge"] == "CRASHED", first["tasks"]
    assert "RUNNING" not in first["tasks"].values()
    from helpers.command import nexusflow_here

    shown = nexusflow_here(capsys, "show", session_id)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert f"flow run agent-{session_id} ({first['id']}): Crashed" in shown.stdout
    assert "Running" not in shown.stdout


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is not installed")
def test_a_killed_holder_elsewhere_is_crashed_by_the_take_over_once_it_stops_beating(tmp_path, session_id):
    """A holder that looks like another machine's (a PID namespace of its own: its process
    cannot be looked up here) is taken over once its heartbeat stood still, and its run is
    marked Crashed saying so."""
    gate = tmp_path / "gate"
    holder = hold(session_id, tmp_path / "held", gate, dict(os.environ), ("unshare", "--pid", "--fork"))
    _until(session_id, lambda runs: runs[-1]["tasks"].get("tool-0-charge") == "RUNNING")
    kill(holder)
    gate.touch()
    again = rerun(session_id, tmp_path / "again", dict(os.environ))
    assert again.returncode == 0 and '"completed"' in again.stdout.splitlines()[-1], again.stderr[-3000:]
    first, _ = _until(session_id, lambda runs: len(runs) == 2 and "RUNNING" not in runs[0]["tasks"].values())
    assert first["state"] == "CRASHED", first
    assert re.match(
        rf'^nexusflow: session "{re.escape(session_id)}": its run has not beaten for \d+s; found by the take-over$',
        first["message"] or "",
    ), first["message"]
    assert first["tasks"]["tool-0-charge"] == "CRASHED", first["tasks"]


def test_a_killed_run_is_crashed_by_nexusflow_sessions(tmp_path, session_id):
    """Only ``nexusflow sessions`` runs after the kill: the holder's process is provably gone
    on this machine, so it is crashed, and says so on the server too; a second listing
    changes nothing."""
    holder = hold(session_id, tmp_path / "held", tmp_path / "gate", dict(os.environ))
    _until(session_id, lambda runs: runs[-1]["tasks"].get("tool-0-charge") == "RUNNING")
    kill(holder)
    listed = subprocess.run(
        [sys.executable, "-m", "nexusflow", "sessions", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # not the repository: the nexusflow installed
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    # what is stored, though its status still reads 0 from its start: its turn 0 and the call
    # of turn 0 that ended (notify) beside the one it died in (charge)
    stored = {"session_id": session_id, "state": "crashed", "turns": 1, "tool_calls": 1, "last_step": "tool-0"}
    assert (
        stored.items()
        <= next(entry for entry in json.loads(listed.stdout) if entry["session_id"] == session_id).items()
    )
    (run,) = _until(session_id, lambda runs: "RUNNING" not in runs[0]["tasks"].values())
    assert run["state"] == "CRASHED", run
    assert re.match(
        rf'^nexusflow: session "{re.escape(session_id)}": its process \d+ on this machine died;'
        r" found by nexusflow sessions$",
        run["message"] or "",
    ), run["message"]
    assert run["tasks"]["tool-0-charge"] == "CRASHED", run["tasks"]
    again = subprocess.run(
        [sys.executable, "-m", "nexusflow", "sessions", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # not the repository: the nexusflow installed
    )
    assert again.returncode == 0 and runs_of(session_id) == [run]
    table = subprocess.run(
        [sys.executable, "-m", "nexusflow", "sessions"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    (row,) = [line for line in table.stdout.splitlines() if line.startswith(session_id)]
    assert row.split()[1] == "crashed" and row.endswith(f"{run['id']}  last stored step tool-0"), row


PROGRAM = """
import asyncio, sys
from nexusflow import Toolkit, create_in_process_client, tool
from nexusflow.testing import ScriptedModel

@tool
async def wait(seconds: float) -> str:
    \"\"\"Wait (async: a sync tool's worker thread would keep the program alive until it returns).\"\"\"
    await asyncio.sleep(seconds)
    return "waited"

async def main():
    model = ScriptedModel([{{"tool_calls": [{{"name": "wait", "arguments": {{"seconds": 600}}}}]}}, "done"])
    client = create_in_process_client(generate=model)
    async with await Toolkit.load(tools=[wait]) as toolkit:
        result = await client.run("wait", toolkit, session_id={session!r})
    print(result.status)

try:
    asyncio.run(main())
except KeyboardInterrupt:
    sys.exit(130)
"""


def _start(argv: list[str], tmp_path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal gives a command
        cwd=tmp_path,
        env={**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"},
    )


def _in_its_tool(process: subprocess.Popen[str], session_id: str, runs: int = 1) -> None:
    """Until the run's ``tool-0-wait`` task run is running."""
    deadline = time.monotonic() + 180
    while True:
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run never reached its tool"
        found = runs_of(session_id)
        if len(found) == runs and found[-1]["tasks"].get("tool-0-wait") == "RUNNING":
            return
        time.sleep(0.3)


def _interrupted_is_cancelled(session_id: str, signal_name: str, err: str) -> dict[str, Any]:
    assert "Traceback" not in err and "Crash detected" not in err, err[-3000:]
    assert not [line for line in err.splitlines() if "| ERROR" in line or "| WARNING" in line], err[-3000:]
    (run,) = _until(session_id, lambda runs: runs[0]["tasks"].get("tool-0-wait") not in (None, "RUNNING", "CRASHED"))
    assert run["state"] == "CANCELLED", run
    assert run["message"] == (
        f'nexusflow: session "{session_id}": interrupted by {signal_name};'
        " it goes on from its finished steps when run again"
    )
    assert run["tasks"] == {"turn-0": "COMPLETED", "tool-0-wait": "CANCELLED"}, run["tasks"]
    return run


def _resumed(tmp_path: Path, session_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers.command import nexusflow_here

    (tmp_path / "slow_tools.py").write_text(SLOW_TOOL.replace("time.sleep(seconds)", "pass"))
    again = nexusflow_here(capsys, "run", "--session", session_id)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == "wait: waited\n"
    _, second = _until(session_id, lambda runs: len(runs) == 2 and len(runs[1]["tasks"]) == 3)
    assert second["state"] == "COMPLETED"
    assert second["tasks"]["turn-0"] == "COMPLETED"  # replayed from storage (Cached is a Completed type)


@pytest.mark.parametrize("sent", ["SIGINT", "SIGTERM"])
def test_an_interrupted_command_ends_cancelled_and_goes_on(tmp_path, session_id, capsys, sent):
    (tmp_path / "slow_tools.py").write_text(SLOW_TOOL)
    argv = ["nexusflow", "run", 'call wait {"seconds": 600}', "--tools", "slow_tools.py:wait"]
    run = _start([*argv, "--session", session_id], tmp_path, dict(os.environ))
    _in_its_tool(run, session_id)
    if sent == "SIGINT":
        os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    else:
        run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == (130 if sent == "SIGINT" else 143), err[-3000:]
    assert f"nexusflow: interrupted; go on with: nexusflow run --session {session_id}" in err
    _interrupted_is_cancelled(session_id, sent, err)
    _resumed(tmp_path, session_id, capsys)


def test_a_python_program_interrupted_by_ctrl_c_ends_cancelled(tmp_path, session_id):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM.format(session=session_id))
    run = _start([sys.executable, str(program)], tmp_path, dict(os.environ))
    _in_its_tool(run, session_id)
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err[-3000:]
    _interrupted_is_cancelled(session_id, "SIGINT", err)
