"""Suspension: tools that ask before they act, and how runs get their answers."""

import os
import subprocess
import sys
import threading
import time

import pytest

from nexusflow import (
    Answer,
    ModelRequest,
    Request,
    ResumeError,
    RunResult,
    Toolkit,
    ToolPolicy,
    TransientError,
    create_in_process_client,
    current_answer,
    suspend,
    tool,
)
from nexusflow.testing import ScriptedModel

from approvals import Approval
from helpers.prefect_api import task_runs
from paths import HELPERS

pytestmark = [pytest.mark.anyio]


@tool
def nag(topic: str) -> str:
    """Always asks again."""
    return suspend(f"Really {topic}?")


def calls(*pairs: tuple[str, dict]) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments} for name, arguments in pairs]}


def tool_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


@pytest.fixture
def approval() -> Approval:
    """The gated ``deploy`` with data both ways: it asks with its service as the request's
    data and says the answer's data back."""
    return Approval.fresh(with_data=True)


def answering(ok: bool, reason: str | None = None, data=None, log: list[Request] | None = None):
    async def wait_for(request: Request) -> Answer:
        if log is not None:
            log.append(request)
        return Answer(id=request.id, ok=ok, reason=reason, data=data)

    return wait_for


async def run(model, *, session_id, tools, **options) -> RunResult:
    async with await Toolkit.load(tools=list(tools)) as toolkit:
        return await create_in_process_client(model, **options).run("go", toolkit, session_id=session_id)


@pytest.mark.slow
async def test_without_wait_for_the_run_ends_pending_and_resumes_in_a_new_process(tmp_path, session_id):
    def child(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(HELPERS / "pending_run.py"), *args, session_id, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
            env=os.environ.copy(),
        )

    started = child("start")
    assert started.returncode == 0, started.stderr[-3000:]
    first = RunResult.model_validate_json(started.stdout.strip().splitlines()[-1])
    assert first.status == "pending"
    assert first.request.id == f"{session_id}.0.0"
    assert first.request.prompt == "May I delete every file matching *.tmp?"
    assert first.request.tool == "delete_files" and first.request.arguments == '{"pattern": "*.tmp"}'
    assert not (tmp_path / "deleted").exists()
    assert (first.metrics.turns, first.metrics.tool_calls, first.metrics.suspensions) == (1, 1, 1), first.metrics

    resumed = subprocess.run(
        [sys.executable, str(HELPERS / "pending_run.py"), "resume", session_id, str(tmp_path), "yes"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = RunResult.model_validate_json(resumed.stdout.strip().splitlines()[-1])
    assert result.status == "completed", result.error
    assert result.text == "done: deleted *.tmp (approved: {'by': 'ops'})"
    assert (tmp_path / "deleted").read_text().split() == ["*.tmp"], "the tool ran once, after the approval"
    assert (tmp_path / "model_turns").read_text().split() == ["0", "1"], "the model is not asked again"
    assert result.metrics.suspensions == 1 and result.metrics.tool_errors == 0
    runs = await task_runs(result.flow_run_id, expected=5)
    assert {"suspend-0-delete_files", "wait-0-delete_files"} <= {r.name for r in runs}


async def test_resume_refuses_what_it_cannot_continue(session_id):
    client = create_in_process_client(ScriptedModel(["done"]))
    with pytest.raises(ResumeError, match="no session"):
        await client.resume("never-ran-" + session_id, Answer(id="x", ok=True))
    await client.run("hi", session_id=session_id)
    with pytest.raises(ResumeError, match="is not waiting for an answer"):
        await client.resume(session_id, Answer(id="x", ok=True))


@pytest.mark.slow
async def test_answers_reach_the_model(session_id, approval: Approval):
    model = ScriptedModel([calls(("deploy", {"service": "api"})), lambda r: tool_texts(r)[0]])
    approved = await run(model, session_id=session_id, tools=(approval.deploy,), wait_for=answering(True, data="v2"))
    assert approved.text == "deployed api with v2"
    assert approval.deployed == ["api"]

    model = ScriptedModel([calls(("deploy", {"service": "db"})), lambda r: tool_texts(r)[0]])
    declined = await run(model, session_id=session_id + "-d", tools=(approval.deploy,), wait_for=answering(False))
    assert declined.text == "declined: May I deploy db?"

    model = ScriptedModel([calls(("deploy", {"service": "db"})), lambda r: tool_texts(r)[0]])
    expired = await run(
        model, session_id=session_id + "-e", tools=(approval.deploy,), wait_for=answering(False, reason="expired")
    )
    assert expired.text == "expired: May I deploy db?"
    assert approval.deployed == ["api"]


async def test_a_second_suspension_of_the_same_call_is_unresolved(session_id):
    model = ScriptedModel([calls(("nag", {"topic": "now"})), lambda r: tool_texts(r)[0]])
    result = await run(model, session_id=session_id, tools=(nag,), wait_for=answering(True))
    assert result.text == "unresolved: Really now?"


@pytest.mark.slow
async def test_several_suspensions_are_asked_in_call_order(session_id, approval: Approval):
    asked: list[Request] = []
    model = ScriptedModel(
        [calls(("nag", {"topic": "first"}), ("deploy", {"service": "second"}), ("nag", {"topic": "third"})), "ok"]
    )
    await run(model, session_id=session_id, tools=(nag, approval.deploy), wait_for=answering(False, log=asked))
    assert [r.prompt for r in asked] == ["Really first?", "May I deploy second?", "Really third?"]


async def test_a_before_tool_hook_can_suspend_so_the_tool_never_runs(session_id, approval: Approval):

    def guard(call):
        return suspend(f"Allow {call.name}?") if current_answer() is None else None

    model = ScriptedModel([calls(("deploy", {"service": "web"})), lambda r: tool_texts(r)[0]])
    result = await run(
        model, session_id=session_id, tools=(approval.deploy,), before_tool=guard, wait_for=answering(False)
    )
    assert result.text == "declined: Allow deploy?"
    assert approval.deployed == []


async def test_an_approval_policy_asks_before_the_tool_runs(session_id):
    executed: list[str] = []

    @tool
    def remove(path: str) -> str:
        """Remove a path."""
        executed.append(path)
        return f"removed {path}"

    asked: list[Request] = []
    policy = ToolPolicy(approval=lambda arguments: arguments["path"].startswith("/"))
    model = ScriptedModel(
        [calls(("remove", {"path": "tmp/x"}), ("remove", {"path": "/etc"})), lambda r: " | ".join(tool_texts(r))]
    )
    result = await run(
        model, session_id=session_id, tools=(remove,), policies={"rem*": policy}, wait_for=answering(False, log=asked)
    )
    assert result.text == 'removed tmp/x | declined: Allow the tool "remove" to run with {"path": "/etc"}?'
    assert executed == ["tmp/x"]
    assert [r.tool for r in asked] == ["remove"]


@pytest.mark.slow
async def test_a_concurrency_limit_holds_across_parallel_calls(session_id):
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    @tool
    def crawl(page: int) -> int:
        """Fetch a page slowly."""
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.6)
        with lock:
            state["now"] -= 1
        return page

    model = ScriptedModel([calls(*[("crawl", {"page": n}) for n in range(6)]), "done"])
    result = await run(model, session_id=session_id, tools=(crawl,), policies={"crawl": ToolPolicy(concurrency=2)})
    assert result.status == "completed", result.error
    assert state["max"] == 2
    assert [m.content for m in result.messages if m.role == "tool"] == [str(n) for n in range(6)]


async def test_timeouts_and_retries(session_id):
    attempts = {"flaky": 0, "broken": 0}

    @tool
    async def slow() -> str:
        """Takes too long."""
        import anyio

        await anyio.sleep(5)
        return "late"

    @tool
    def flaky() -> str:
        """Fails twice, transiently."""
        attempts["flaky"] += 1
        if attempts["flaky"] < 3:
            raise TransientError("connection refused")
        return "finally"

    @tool
    def broken() -> str:
        """Fails in a way that may have had effects."""
        attempts["broken"] += 1
        raise RuntimeError("half written")

    policies = {
        "slow": ToolPolicy(timeout=0.5),
        "*": ToolPolicy(retries=3, retry_delay=0.01),
    }
    model = ScriptedModel([calls(("slow", {}), ("flaky", {}), ("broken", {})), lambda r: "\n".join(tool_texts(r))])
    result = await run(model, session_id=session_id, tools=(slow, flaky, broken), policies=policies)
    slow_text, flaky_text, broken_text = result.text.split("\n")
    assert slow_text == 'error: tool "slow" timed out after 0.5s'
    assert flaky_text == "finally" and attempts["flaky"] == 3
    assert broken_text == 'error: tool "broken" raised RuntimeError: half written' and attempts["broken"] == 1
