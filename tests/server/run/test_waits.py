"""The built-in waits against the session's Prefect server, answered from other processes (the
command's ``run --answer`` of a pending run, which waits on nothing, runs in this one)."""

import json
import os
import subprocess
import sys
import time
from uuid import UUID

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
from prefect.settings import get_current_settings

from nexusflow import (
    EventWait,
    Polling,
    PrefectPause,
    RunResult,
    Toolkit,
    create_in_process_client,
    current_answer,
    suspend,
    tool,
)
from nexusflow.testing import ScriptedModel

from helpers.command import nexusflow_here
from helpers.prefect_api import flow_run_logs

pytestmark = [pytest.mark.anyio]

ran: list[str] = []


@tool
def release(version: str) -> str:
    """Release a version, after approval."""
    answer = current_answer()
    if answer is None:
        return suspend(f"May I release {version}?")
    ran.append(version)
    return f"released {version} ({answer.data})"


def model() -> ScriptedModel:
    return ScriptedModel(
        [
            {"tool_calls": [{"name": "release", "arguments": {"version": "1.2"}}]},
            lambda request: next(m.content for m in request.messages if m.role == "tool"),
        ]
    )


def child(*argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]
    return done


async def paused(session_id: str, timeout: float = 90) -> str:
    """The id of the session's flow run, once it is paused."""
    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while time.monotonic() < deadline:
            runs = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[f"agent-{session_id}"]))
            )
            for run in runs:
                if run.state is not None and run.state.is_paused():
                    return str(run.id)
            await anyio.sleep(0.5)
    raise AssertionError("the run never paused")


async def run_answered_by(session_id: str, wait_for, answer) -> RunResult:
    """Run while ``answer(flow_run_id)`` answers from outside."""
    box: dict[str, RunResult] = {}

    async def go() -> None:
        async with await Toolkit.load(tools=[release]) as toolkit:
            box["result"] = await create_in_process_client(model(), wait_for=wait_for).run(
                "ship it", toolkit, session_id=session_id
            )

    async with anyio.create_task_group() as group:
        group.start_soon(go)
        if answer is not None:
            flow_run_id = await paused(session_id)
            await anyio.to_thread.run_sync(answer, flow_run_id)
    return box["result"]


@pytest.mark.slow
async def test_pause_approved_with_resume_flow_run_from_another_process(session_id):
    ran.clear()

    def answer(flow_run_id: str) -> None:
        code = (
            "import sys; from uuid import UUID; from prefect.flow_runs import resume_flow_run; "
            "resume_flow_run(UUID(sys.argv[1]), run_input={'decision': 'approve', 'data': '\"by resume_flow_run\"'})"
        )
        child(sys.executable, "-c", code, flow_run_id)

    result = await run_answered_by(session_id, PrefectPause(timeout=120, poll_interval=1), answer)
    assert result.status == "completed", result.error
    assert result.text == "released 1.2 (by resume_flow_run)"
    assert ran == ["1.2"]


@pytest.mark.slow
async def test_pause_answered_with_the_command(session_id):
    ran.clear()

    def approve(flow_run_id: str) -> None:
        child(sys.executable, "-m", "nexusflow", "answer", flow_run_id, "--approve", "--data", '"by the command"')

    result = await run_answered_by(session_id, PrefectPause(timeout=120, poll_interval=1), approve)
    assert result.text == "released 1.2 (by the command)"

    def deny(flow_run_id: str) -> None:
        child(sys.executable, "-m", "nexusflow", "answer", flow_run_id, "--deny", "--reason", "freeze")

    denied = await run_answered_by(session_id + "-deny", PrefectPause(timeout=120, poll_interval=1), deny)
    assert denied.text == "declined: May I release 1.2?"
    assert ran == ["1.2"]


@pytest.mark.slow
async def test_an_untouched_form_is_refused_and_the_log_says_how_to_answer(session_id):
    ran.clear()

    def answer(flow_run_id: str) -> None:
        code = (
            "import sys; from uuid import UUID; from prefect.flow_runs import resume_flow_run; "
            "resume_flow_run(UUID(sys.argv[1]), run_input={'data': '', 'reason': ''})"
        )
        untouched = subprocess.run(
            [sys.executable, "-c", code, flow_run_id],
            capture_output=True,
            text=True,
            timeout=300,
            env=os.environ.copy(),
        )
        assert untouched.returncode == 1
        assert "Cannot resume this run" in untouched.stderr
        assert "'decision' is a required property" in untouched.stderr
        child(sys.executable, "-m", "nexusflow", "answer", flow_run_id, "--approve")

    result = await run_answered_by(session_id, PrefectPause(timeout=120, poll_interval=1), answer)
    assert result.text == "released 1.2 (None)", "answered once, by the explicit approval"
    run_id = result.flow_run_id
    page = f"{get_current_settings().ui_url}/runs/flow-run/{run_id}"
    hint = (
        f"waiting for an answer to May I release 1.2? (request {session_id}.0.0): approve or deny it on the flow "
        f"run's page in the Prefect UI ({page}), or run: nexusflow answer {run_id} --approve|--deny"
    )
    lines = await flow_run_logs(run_id, "Finished in state")
    assert (20, hint) in lines
    assert not [message for level, message in lines if level >= 40]


@pytest.mark.slow
async def test_a_suspended_job_says_how_to_answer_and_logs_no_error(session_id):
    """A deployment's run, started as a process worker starts it (``prefect.flow_engine``)."""
    from nexusflow.job import agent_job

    async with get_client() as client:
        deployment_id = await client.create_deployment(
            flow_id=await client.create_flow(agent_job),
            name=session_id,
            entrypoint="nexusflow.job:agent_job",
            parameters={
                "prompt": 'call current_temperature {"city": "Lisbon"}',
                "tools": ["nexusflow.demo:TOOLS"],
                "approval": ["current_temperature"],
                "wait": "suspend",
                "session_id": session_id,
            },
        )
        run = await client.create_flow_run_from_deployment(deployment_id)
    engine = [sys.executable, "-m", "prefect.flow_engine", "nexusflow.job:agent_job"]
    await anyio.to_thread.run_sync(
        lambda: subprocess.run(engine, timeout=300, env={**os.environ, "PREFECT__FLOW_RUN_ID": str(run.id)})
    )
    async with get_client() as client:
        state = (await client.read_flow_run(run.id)).state
    assert state is not None and state.name == "Suspended"

    lines = await flow_run_logs(str(run.id), "Finished in state Suspended")
    finished = [level for level, message in lines if message.startswith("Finished in state Suspended(")]
    assert finished == [20], "Prefect's closing line of the flow run, lowered from ERROR"
    hints = [message for level, message in lines if level == 20 and message.startswith("waiting for an answer")]
    assert len(hints) == 1 and hints[0].endswith(f"or run: nexusflow answer {run.id} --approve|--deny")
    assert not [message for level, message in lines if level >= 40]


@pytest.mark.slow
async def test_a_pause_that_times_out_is_expired(session_id):
    result = await run_answered_by(session_id, PrefectPause(timeout=2, poll_interval=1), None)
    assert result.status == "completed", result.error
    assert result.text == "expired: May I release 1.2?"


EMIT = (
    "import sys, json; from prefect.events import emit_event; "
    "emit_event(sys.argv[1], resource={'prefect.resource.id': sys.argv[2]}, payload=json.loads(sys.argv[3]))"
)


@pytest.mark.slow
async def test_an_event_emitted_before_the_wait_resolves_it(session_id):
    resource = f"ci.build.{session_id}"
    child(sys.executable, "-c", EMIT, "ci.build.finished", resource, json.dumps({"status": "green"}))
    result = await run_answered_by(session_id, EventWait("ci.build.finished", resource=resource, timeout=60), None)
    assert result.text == "released 1.2 ({'status': 'green'})"


@pytest.mark.slow
async def test_an_event_emitted_during_the_wait_from_another_process_resolves_it(session_id):
    resource = f"ci.build.{session_id}"

    async def emit_later() -> None:
        await anyio.sleep(3)
        await anyio.to_thread.run_sync(
            lambda: child(sys.executable, "-c", EMIT, "ci.build.finished", resource, json.dumps({"status": "late"}))
        )

    async with anyio.create_task_group() as group:
        group.start_soon(emit_later)
        result = await run_answered_by(session_id, EventWait("ci.build.finished", resource=resource, timeout=90), None)
    assert result.text == "released 1.2 ({'status': 'late'})"


@pytest.mark.slow
async def test_an_event_about_another_resource_does_not(session_id):
    child(sys.executable, "-c", EMIT, "ci.build.finished", "ci.build.other", "{}")
    wait = EventWait("ci.build.finished", resource=f"ci.build.{session_id}", timeout=3)
    result = await run_answered_by(session_id, wait, None)
    assert result.text == "expired: May I release 1.2?"


@pytest.mark.slow
async def test_polling_resolves_when_the_condition_holds(session_id):
    polls: list[str] = []

    def built(request) -> bool:
        polls.append(request.id)
        return len(polls) >= 3

    result = await run_answered_by(session_id, Polling(built, interval=0.2, timeout=30), None)
    assert result.text == "released 1.2 (None)"
    assert len(polls) == 3

    never = await run_answered_by(session_id + "-never", Polling(lambda r: False, interval=0.2, timeout=1), None)
    assert never.text == "expired: May I release 1.2?"


@pytest.mark.slow
def test_run_answer_on_the_command_line(tmp_path, session_id, capsys):
    tools = tmp_path / "shiptools.py"
    tools.write_text(
        "from nexusflow import tool, suspend, current_answer\n"
        "@tool\n"
        "def ship(what: str) -> str:\n"
        '    """Ship."""\n'
        "    answer = current_answer()\n"
        "    if answer is None:\n"
        "        return suspend(f'Ship {what}?')\n"
        "    return f'shipped {what} with {answer.data}'\n"
    )
    prompt = 'call ship {"what": "v9"}'
    first = nexusflow_here(capsys, "run", prompt, "--tools", f"{tools}:ship", "--session", session_id)
    assert first.returncode == 3, first.stderr[-3000:]
    assert "waiting for an answer: Ship v9?" in first.stderr
    second = nexusflow_here(
        capsys,
        "run",
        "--tools",
        f"{tools}:ship",
        "--session",
        session_id,
        "--answer",
        "approve",
        "--answer-data",
        '{"ok": 1}',
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout == "ship: shipped v9 with {'ok': 1}\n"
    assert UUID(second.stderr.split("/runs/flow-run/")[1][:36])
