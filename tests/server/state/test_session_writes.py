"""Only the holder of a session's lock writes that session's state: a start that is refused
because the session runs leaves every byte of it as it was (invocation, inputs, session
record, status, conversation, what it waits for)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nexusflow import Toolkit, create_in_process_client
from nexusflow._prefect.storage import holding, write_record
from nexusflow.state.store import SessionStatus, write_status
from nexusflow.testing import ScriptedModel

from approvals import gated_deploy
from helpers.command import nexusflow_here

pytestmark = [pytest.mark.anyio]

FIRST = '''
import time
from pathlib import Path
from nexusflow import current_answer, suspend, tool

@tool
def hold(gate: str) -> str:
    """Wait until the gate opens."""
    Path(gate + ".holding").touch()
    while not Path(gate).exists():
        time.sleep(0.05)
    return "held"

@tool
def deploy(service: str) -> str:
    """Deploy a service, after approval."""
    if current_answer() is None:
        return suspend(f"May I deploy {service}?")
    return f"deployed {service} (the first process's tool)"
'''

SECOND = '''
from nexusflow import current_answer, suspend, tool

@tool
def deploy(service: str) -> str:
    """Deploy a service, after approval."""
    if current_answer() is None:
        return suspend(f"May I deploy {service}?")
    return f"deployed {service} (the refused process's tool)"
'''


def _records(storage: Path, session_id: str) -> dict[str, bytes]:
    """Every record of the session but its lease's beat, which its holder rewrites each second."""
    root = storage / "nexusflow" / "sessions" / session_id
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != "lease.json"
    }


def _start_first(tmp_path: Path, session_id: str) -> tuple[subprocess.Popen[str], Path]:
    first = tmp_path / "first.py"
    first.write_text(FIRST)
    gate = tmp_path / "gate"
    prompt = f'call hold {{"gate": "{gate}"}}\n\ncall deploy {{"service": "staging"}}'
    argv = ["run", prompt, "--tools", f"{first}:hold", "--tools", f"{first}:deploy", "--session", session_id]
    process = subprocess.Popen(
        [sys.executable, "-m", "nexusflow", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not Path(f"{gate}.holding").exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the first run never reached its hold"
        time.sleep(0.1)
    return process, gate


def _refused_second(tmp_path: Path, session_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    second = tmp_path / "second.py"
    second.write_text(SECOND)
    refused = nexusflow_here(
        capsys, "run", 'call deploy {"service": "prod"}', "--tools", f"{second}:deploy", "--session", session_id
    )
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert f'session: "{session_id}" is already running' in refused.stderr


@pytest.mark.slow
def test_a_refused_start_changes_nothing_and_the_approval_runs_the_first_process_s_tool(
    tmp_path, session_id, storage, capsys
):
    """The first process waits in a tool; a second ``run`` of the session with another tool
    and prompt is refused; the first goes on to its approval, and the answer runs the first
    process's tool with the first prompt. On ad9173b the answer ran the refused tool."""
    first, gate = _start_first(tmp_path, session_id)
    try:
        before = _records(storage, session_id)
        assert {"invocation.json", "session.json", "status.json"} <= before.keys()
        _refused_second(tmp_path, session_id, capsys)
        assert _records(storage, session_id) == before, "the refused start wrote to the live session"
        gate.touch()
        _, err = first.communicate(timeout=120)
    finally:
        gate.touch()
        if first.poll() is None:
            first.kill()
    assert first.returncode == 3, err[-3000:]
    answered = nexusflow_here(capsys, "answer", session_id, "--approve")
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert answered.stdout.splitlines()[-1] == "deploy: deployed staging (the first process's tool)"


@pytest.mark.slow
def test_a_refused_start_then_the_first_process_killed_resumes_the_first_prompt(tmp_path, session_id, storage, capsys):
    """As above, but the first process is killed while it holds the session: ``run
    --session`` goes on with the first prompt and tools, its finished steps replayed. On
    ad9173b it went on with the refused prompt."""
    first, gate = _start_first(tmp_path, session_id)
    try:
        before = _records(storage, session_id)
        _refused_second(tmp_path, session_id, capsys)
        assert _records(storage, session_id) == before
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=60)
    gate.touch()
    again = nexusflow_here(capsys, "run", "--session", session_id)
    assert again.returncode == 3, again.stderr[-3000:]
    assert "May I deploy staging?" in again.stderr
    answered = nexusflow_here(capsys, "answer", session_id, "--approve")
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert answered.stdout.splitlines()[-1] == "deploy: deployed staging (the first process's tool)"


async def test_a_session_record_written_by_a_run_that_does_not_hold_the_session_is_refused(session_id):
    """The guard every session write passes: what a refused start, or a holder that lost its
    lock, would write is refused before it reaches storage, naming the record."""
    status = SessionStatus(state="failed", flow_run_id="x", updated="2026-12-06T00:00:00Z")
    with pytest.raises(AssertionError, match=f"status.json written by a run that does not hold session '{session_id}'"):
        await write_status(session_id, status)
    for name in ("invocation.json", "session.json", "lease.json", "nesting.json", "inputs-0123.json"):
        with pytest.raises(AssertionError, match=name):
            await write_record(status, "sessions", session_id, name)
    with holding(f"{session_id}.other"), pytest.raises(AssertionError):
        await write_status(session_id, status)  # holding another session is not holding this one
    with holding(session_id):
        await write_status(session_id, status)


async def test_every_write_of_a_run_its_pending_resume_and_a_conversation_is_made_by_the_holder(session_id):
    """A run that ends pending, its resume, an ``ask`` and a run refused beside a live one:
    the guard above raises on any session record written without the lock, so each of these
    paths would fail here if one of its writes were not under it."""
    from nexusflow import Answer

    deploy = gated_deploy()
    model = ScriptedModel([{"tool_calls": [{"name": "deploy", "arguments": {"service": "db"}}]}, "done"])
    client = create_in_process_client(model)
    async with await Toolkit.load(tools=[deploy]) as toolkit:
        waiting = await client.run("go", toolkit, session_id=session_id)
        assert waiting.status == "pending" and waiting.request is not None
        done = await client.resume(session_id, Answer(id=waiting.request.id, ok=True), toolkit)
    assert done.status == "completed", done.error
    await _refused_beside_a_live_run(f"{session_id}-busy")
    talker = create_in_process_client(lambda request: f"heard {len(request.messages)}")
    assert (await talker.ask("hi", conversation_id=f"{session_id}-talk")).status == "completed"
    again = await talker.ask("more", conversation_id=f"{session_id}-talk")
    assert again.status == "completed" and again.text == "heard 3", "the first exchange was kept, by its holder"


async def _refused_beside_a_live_run(session_id: str) -> None:
    """Two runs of one session in one process: the second is refused and writes nothing
    (the guard tells the holder's context from the refused run's)."""
    import anyio

    from nexusflow import tool

    entered, release = anyio.Event(), anyio.Event()

    @tool
    async def hold() -> str:
        """Hold the session."""
        entered.set()
        await release.wait()
        return "held"

    live = create_in_process_client(ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}, "done"]))
    other = create_in_process_client(lambda request: "the refused run's answer")
    results = {}

    async def first() -> None:
        results["first"] = await live.run("hold it", Toolkit([hold]), session_id=session_id)

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        await entered.wait()
        refused = await other.run("another prompt", session_id=session_id)
        release.set()
    assert refused.status == "failed" and "is already running" in str(refused.error), refused
    assert results["first"].status == "completed" and results["first"].text == "done"
