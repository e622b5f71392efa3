"""A server restart is one line, or none (issue 42): a run on ``nexusflow server`` whose tool
finishes while the server is stopped, the server started again on the same port. The run goes
on and completes once the server is back, quietly: Prefect's events client keeps what it could
not send and sends it again, and says so in one INFO line instead of a WARNING and an ERROR
(with the event's whole repr) every seven seconds. Nothing is lost: the run's task runs reach
the server, and a second run of the session replays every step. On ee8495d the run completed
too, with those lines on stderr.

The Python program's server stays down for ``LONG_OUTAGE`` seconds, longer than Prefect's
client retries a request (about a minute): the run's progress artifact, written after its last
turn, is not taken (one INFO line), and the run still completes in its first flow run. Before,
that write failed the run, and ``Client.run`` started it again as a second flow run (CI, with a
server slow to start again). The whole-run retry stays legitimate when the outage outlasts the
flow run's own final state: then every flow run of the first program has ended, its last one
Completed, and the tool ran once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from nexusflow.flows.report import ARTIFACT_NOT_TAKEN

from helpers.homes import loud, new_user_environment, nexusflow_server, noise, served
from helpers.servers import free_port, migrated_home

pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("heavy")]

HOLD = '''
import asyncio, pathlib
from nexusflow import tool

@tool
async def hold(gate: str) -> str:
    """Wait until the file ``gate`` exists."""
    with open(gate + ".calls", "a") as calls:
        calls.write("called\\n")
    while not pathlib.Path(gate).exists():
        await asyncio.sleep(0.2)
    return "held"
'''

LONG_OUTAGE = 70.0
"""Seconds the Python program's server stays down once the run waits: longer than Prefect's
client retries (2 + 4 + 8 + 16 + 32 s, with jitter)."""

PROGRAM = """
from slow_tools import hold
from nexusflow import Toolkit, create_in_process_client
from nexusflow.testing import ScriptedModel

model = ScriptedModel([{{"tool_calls": [{{"name": "hold", "arguments": {{"gate": {gate!r}}}}}]}}, "done"])
result = create_in_process_client(generate=model).run_sync("hold", Toolkit([hold]), session_id={session!r})
print(result.status, result.text)
"""

WAITING = ("the Prefect server does not answer", "Unable to connect to ")
"""What the run's stderr says once an event could not be sent (nexusflow's line; Prefect's)."""


def _argv(how: str, tmp_path: Path, gate: Path, session: str) -> tuple[list[str], str]:
    """The run, as the command or as a Python program, and what it prints when it completes."""
    (tmp_path / "slow_tools.py").write_text(HOLD)
    if how == "command":
        call = f"call hold {json.dumps({'gate': str(gate)})}"
        return ["nexusflow", "run", call, "--tools", "slow_tools.py:hold", "--session", session], "hold: held\n"
    (tmp_path / "program.py").write_text(PROGRAM.format(gate=str(gate), session=session))
    return [sys.executable, str(tmp_path / "program.py")], "completed done\n"


def _until_in(path: Path, needles: tuple[str, ...], process: subprocess.Popen[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not any(needle in path.read_text() for needle in needles):
        assert process.poll() is None, path.read_text()[-3000:]
        assert time.monotonic() < deadline, f"never said any of {needles}: {path.read_text()[-3000:]}"
        time.sleep(0.2)


def _runs(url: str, session: str) -> list[dict[str, Any]]:
    """The session's flow runs, oldest first, with their task runs' state names."""
    found = httpx.post(f"{url}/flow_runs/filter", json={"flow_runs": {"name": {"any_": [f"agent-{session}"]}}}).json()
    runs = []
    for run in sorted(found, key=lambda run: run["created"]):
        tasks = httpx.post(f"{url}/task_runs/filter", json={"flow_runs": {"id": {"any_": [run["id"]]}}}).json()
        runs.append({"state": run["state"]["type"], "tasks": {task["name"]: task["state"]["name"] for task in tasks}})
    return runs


@pytest.mark.parametrize(("how", "outage"), [("command", 0.0), ("python", LONG_OUTAGE)])
def test_a_server_restart_while_a_run_goes_on_is_quiet_and_loses_nothing(tmp_path, session_id, how, outage):
    home = tmp_path / "home"
    migrated_home(home)
    env = new_user_environment(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    port = str(free_port())
    gate = tmp_path / "gate"
    argv, completed = _argv(how, tmp_path, gate, session_id)
    err = tmp_path / "run.err"
    with nexusflow_server(env, tmp_path / "server.log", "--port", port) as server:
        url = served(server)
        with err.open("w") as errors:
            run = subprocess.Popen(
                argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True
            )
        try:
            _until_in(err, ("Task run 'tool-0-hold' - arguments",), run)
            server.terminate()  # what `nexusflow server` gets from Ctrl-C, systemd or an upgrade
            server.wait(timeout=60)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)  # its Prefect server, if it lingers
            gate.touch()  # the tool ends while the server is down: the run's events cannot go
            _until_in(err, WAITING, run)
            time.sleep(outage)
            with nexusflow_server(env, tmp_path / "server-again.log", "--port", port) as again:
                assert served(again) == url
                out, _ = run.communicate(timeout=600)
                rerun = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
                runs = _runs(url, session_id)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
    said = err.read_text()
    assert run.returncode == 0 and out == completed, said[-3000:]
    assert noise(said) == [], loud(said)
    assert "--- Error logging to API ---" not in said, said[-3000:]
    assert "the Prefect server does not answer ([Errno 111] Connect call failed" in said, said[-3000:]
    assert rerun.returncode == 0 and rerun.stdout == completed, rerun.stderr[-3000:]
    *firsts, rerun_run = runs
    assert (gate.parent / "gate.calls").read_text() == "called\n", "the tool ran once, whatever was retried"
    assert all(flow_run["state"] in ("COMPLETED", "FAILED") for flow_run in firsts), runs
    done = {"turn-0": "Completed", "tool-0-hold": "Completed", "turn-1": "Completed"}
    if len(firsts) == 1:
        assert firsts[0] == {"state": "COMPLETED", "tasks": done}, "the events sent again once the server was back"
    else:  # the outage outlasted the flow run's final state: the run started again, every step replayed
        assert firsts[-1] == {"state": "COMPLETED", "tasks": dict.fromkeys(done, "Cached")}, runs
    assert rerun_run == {"state": "COMPLETED", "tasks": dict.fromkeys(done, "Cached")}, "every step replayed"
    if outage:
        assert ARTIFACT_NOT_TAKEN.split(" %s")[0] in said, said[-3000:]
