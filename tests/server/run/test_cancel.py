"""A run the user cancels ends ``Cancelled``, its session resumable (issue 42): a deployment
run of ``agent_job`` on a real process worker, cancelled from the command line (what the UI's
Cancel does) while it is inside a slow tool; and ``run_sync`` in a plain Python program that a
supervisor (systemd, a container's stop) sends SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from uuid import UUID

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterName,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.deployments import run_deployment

from nexusflow.flows.errors import cancelled_by_signal
from nexusflow.ops.sessions import session_info

from cli_fixtures import envelope_answer, envelope_calls, styled
from deployments import deployed, prefect, state_of, wait_for_state  # noqa: F401 (deployed: a fixture)
from helpers.homes import loud, noise
from helpers.servers import stop
from paths import REPO

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("deployments"),  # the deployments module's worker deploys the project
]

HOLD = '''
import subprocess, sys
from nexusflow import tool

@tool
def hold(gate: str) -> str:
    """Wait until the file ``gate`` exists, in a program of its own (a tool that runs one)."""
    waits = f"import pathlib, time\\nwhile not pathlib.Path({gate!r}).exists(): time.sleep(0.2)"
    subprocess.run([sys.executable, "-c", waits], check=True)
    return "held"
'''


def _marked(mark: str) -> dict[int, str]:
    """The processes whose environment holds ``mark`` (pid: command line)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if mark.encode() in (proc / "environ").read_bytes().split(b"\0"):
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
    return found


async def _task_states(flow_run_id: UUID) -> dict[str, str]:
    async with get_client() as client:
        runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {run.name: run.state.type.value if run.state else "" for run in runs}


async def _until_tasks(flow_run_id: UUID, check, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while not check(found := await _task_states(flow_run_id)) and time.monotonic() < deadline:
        await anyio.sleep(0.5)
    return found


async def _run_logs(flow_run_id: UUID) -> list[str]:
    async with get_client() as client:
        logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return [f"{log.level} {log.message}" for log in sorted(logs, key=lambda log: log.timestamp)]


def _parent(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("deployed")
@pytest.mark.parametrize("how", ["cancel", "kill"])
async def test_a_deployment_run_cancelled_in_a_slow_tool_ends_cancelled_and_resumes(fake, tmp_path, session_id, how):
    """``prefect flow-run cancel`` (what the UI's Cancel does), or a ``kill`` of the run's
    process that its worker never asked for (an operator, an OOM killer's SIGTERM, a
    container's stop), while the run's tool (a program of its own) runs: the run ends
    Cancelled, none of its task runs stays RUNNING, no process of the run remains, the worker
    and the run log no Traceback or ERROR, ``sessions`` does not call it crashed, and a second
    run of the session replays its finished turn and completes. Before, the kill left the
    flow run Running for good: Prefect's engine exits 0 when a cancel intent is set, and the
    worker, which did not ask, recorded nothing."""
    (tmp_path / "slow_tools.py").write_text(HOLD)
    gate = tmp_path / "gate"
    call = envelope_calls({"id": "c1", "name": "hold", "arguments": {"gate": str(gate)}})
    fake.script(styled("gemini", call), styled("gemini", envelope_answer("held it")))
    parameters = {
        "prompt": "Hold on.",
        "style": "gemini",
        "command": fake.command,
        "model": "gemini-2.5-pro",
        "transport": "cli",
        "tools": [f"{tmp_path / 'slow_tools.py'}:hold"],
        "session_id": session_id,
    }
    mark = f"NEXUSFLOW_TEST_MARK={uuid.uuid4().hex}"
    log = tmp_path / "worker.log"
    with log.open("w") as output:
        worker = subprocess.Popen(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", "local"],
            cwd=REPO,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, mark.split("=")[0]: mark.split("=")[1]},
            start_new_session=True,
        )
    try:
        run = await run_deployment("agent-job/weather-report", parameters=parameters, timeout=0)
        running = await _until_tasks(run.id, lambda tasks: tasks.get("tool-0-hold") == "RUNNING", timeout=300)
        assert running.get("tool-0-hold") == "RUNNING", (running, log.read_text()[-3000:])
        assert len(_marked(mark)) > 2, "the worker, the run's process and the tool's program"
        if how == "cancel":
            prefect("flow-run", "cancel", str(run.id))
        else:
            (tool,) = [pid for pid, command in _marked(mark).items() if str(gate) in command]
            os.kill(_parent(tool), signal.SIGTERM)
        state = await wait_for_state(run.id, lambda s: s.is_final(), timeout=120)
        deadline = time.monotonic() + 60
        while (left := {pid: cmd for pid, cmd in _marked(mark).items() if pid != worker.pid}) and (
            time.monotonic() < deadline
        ):
            await anyio.sleep(0.5)
        tasks = await _until_tasks(
            run.id, lambda tasks: tasks.get("tool-0-hold") not in ("RUNNING", "CRASHED"), timeout=30
        )
        info = await session_info(session_id)
        logs = await _run_logs(run.id)
        assert state.is_cancelled(), (state, logs, log.read_text()[-3000:])
        if how == "kill":
            assert state.message == cancelled_by_signal(session_id, "SIGTERM"), state
        assert tasks == {"turn-0": "COMPLETED", "tool-0-hold": "CANCELLED"}, (tasks, logs, log.read_text()[-3000:])
        assert not left, left
        assert info is not None and info.state == "cancelled", info

        gate.touch()
        again = await run_deployment("agent-job/weather-report", parameters=parameters, timeout=0)
        done = await wait_for_state(again.id, lambda s: s.is_final(), timeout=300)
        assert done.is_completed(), (done, log.read_text()[-3000:])
    finally:
        # its group, then SIGKILL: a SIGTERM that met a flow run's end was once lost (the worker
        # went on, and took the next tests' runs of its pool)
        stop(worker)
    assert len(fake.calls()) == 2, "the first turn replayed: the CLI was asked once more, for the answer"
    replayed = await _until_tasks(again.id, lambda tasks: "turn-1" in tasks and "RUNNING" not in tasks.values())
    assert replayed["turn-0"] == "COMPLETED" and replayed["tool-0-hold"] == "COMPLETED", replayed
    worker_log = log.read_text()
    assert noise("\n".join([worker_log, *logs])) == [], loud("\n".join([worker_log, *logs]))


SUPERVISED = '''
import asyncio, pathlib
from nexusflow import Toolkit, create_in_process_client, tool
from nexusflow.testing import ScriptedModel

@tool
async def hold(gate: str) -> str:
    """Wait until the file ``gate`` exists (async: a sync tool's thread, which no signal
    stops, would keep the program alive until it returns)."""
    while not pathlib.Path(gate).exists():
        await asyncio.sleep(0.2)
    return "held"

model = ScriptedModel([{{"tool_calls": [{{"name": "hold", "arguments": {{"gate": {gate!r}}}}}]}}, "done"])
result = create_in_process_client(generate=model).run_sync("hold", Toolkit([hold]), session_id={session!r})
print(result.status, result.text)
'''


def test_run_sync_in_a_program_a_supervisor_stops_with_sigterm_ends_cancelled_and_resumes(tmp_path, session_id):
    """SIGTERM to a plain Python program inside ``run_sync``'s tool (systemd's stop, a
    container's): the program exits 143, its run reads Cancelled with the pinned message and
    its tool's task run Cancelled, no ERROR or Traceback; ``sessions`` says cancelled; the same
    program run again replays the finished turn and completes."""
    gate = tmp_path / "gate"
    program = tmp_path / "program.py"
    program.write_text(SUPERVISED.format(gate=str(gate), session=session_id))
    run = subprocess.Popen(
        [sys.executable, str(program)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    flow_run = None
    deadline = time.monotonic() + 180
    while flow_run is None:
        assert run.poll() is None, run.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run never reached its tool"
        found = anyio.run(_session_runs, session_id)
        if found and anyio.run(_task_states, found[0]).get("tool-0-hold") == "RUNNING":
            flow_run = found[0]
        time.sleep(0.3)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 143, err[-3000:]
    assert noise(err) == [], loud(err)
    state = anyio.run(state_of, flow_run)
    tasks = anyio.run(
        _until_tasks, flow_run, lambda tasks: tasks.get("tool-0-hold") not in (None, "RUNNING", "CRASHED")
    )
    assert state is not None and state.is_cancelled(), state
    assert state.message == (
        f'nexusflow: session "{session_id}": interrupted by SIGTERM; it goes on from its finished steps when run again'
    )
    assert tasks == {"turn-0": "COMPLETED", "tool-0-hold": "CANCELLED"}, tasks
    info = anyio.run(session_info, session_id)
    assert info is not None and info.state == "cancelled", info

    gate.touch()
    again = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert again.returncode == 0 and again.stdout == "completed done\n", again.stderr[-3000:]
    second = anyio.run(_session_runs, session_id)[-1]
    replayed = anyio.run(_until_tasks, second, lambda tasks: "turn-1" in tasks and "RUNNING" not in tasks.values())
    assert replayed == {"turn-0": "COMPLETED", "tool-0-hold": "COMPLETED", "turn-1": "COMPLETED"}, replayed


async def _session_runs(session_id: str) -> list[UUID]:
    """The session's flow runs, oldest first."""
    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[f"agent-{session_id}"]))
        )
    return [run.id for run in sorted(runs, key=lambda run: run.created or 0)]
