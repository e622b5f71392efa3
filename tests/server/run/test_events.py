"""The Prefect events a run emits, read back from the session's server, and the docs'
Automation ("tell me when a run waits for approval") firing on one of them."""

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.events import Event

from nexusflow import Answer, QuotaExhausted, Toolkit, create_in_process_client, current_answer, suspend, tool
from nexusflow.testing import ScriptedModel

from helpers.docs import block
from helpers.prefect_api import events_of

pytestmark = [pytest.mark.anyio]


@tool
def lookup(city: str) -> str:
    """Look a city up; there is no Atlantis."""
    raise LookupError(f"no such city: {city}")


@tool
def launch(rocket: str) -> str:
    """Launches, after approval."""
    if current_answer() is None:
        return suspend(f"May I launch {rocket}?")
    return f"launched {rocket}"


@tool
def detonate(target: str) -> str:
    """Asks first, then fails once approved."""
    if current_answer() is None:
        return suspend(f"May I detonate {target}?")
    raise RuntimeError(f"{target} is out of range")


def related(event: Event) -> dict[str, str]:
    return {resource.role: resource.id for resource in event.related if resource.role in ("flow-run", "tool")}


@pytest.mark.slow
async def test_a_run_that_waits_then_completes_emits_each_event_once(session_id):
    calls = [{"name": "lookup", "arguments": {"city": "Atlantis"}}, {"name": "launch", "arguments": {"rocket": "R1"}}]
    script = [{"tool_calls": calls}, "done"]  # a reply per turn: the resumed run asks for turn 1
    async with await Toolkit.load(tools=[lookup, launch]) as toolkit:
        first = await create_in_process_client(ScriptedModel(script)).run("go", toolkit, session_id=session_id)
        assert first.status == "pending", first.error
        resumed = await create_in_process_client(ScriptedModel(script)).resume(
            session_id, Answer(id=first.request.id, ok=True), toolkit
        )
    assert resumed.status == "completed", resumed.error

    events = await events_of(session_id, expected=4)
    assert [event.event for event in events] == [
        "nexusflow.tool.failed",
        "nexusflow.suspension.requested",
        "nexusflow.run.pending",
        "nexusflow.run.completed",
    ], "the replayed error and suspension of the resumed run emit nothing again"
    for event in events:
        assert event.resource.id == f"nexusflow.session.{session_id}"
        assert event.resource.name == session_id
    failed, requested, pending, completed = events

    assert related(failed) == {"flow-run": f"prefect.flow-run.{first.flow_run_id}", "tool": "nexusflow.tool.lookup"}
    assert failed.payload == {
        "step": 0,
        "tool": "lookup",
        "arguments": '{"city": "Atlantis"}',
        "error": 'error: tool "lookup" raised LookupError: no such city: Atlantis',
    }

    assert related(requested) == {"flow-run": f"prefect.flow-run.{first.flow_run_id}", "tool": "nexusflow.tool.launch"}
    assert requested.payload == {
        "id": f"{session_id}.0.1",
        "kind": "approval",
        "prompt": "May I launch R1?",
        "tool": "launch",
        "arguments": '{"rocket": "R1"}',
        "answer": f"nexusflow answer {session_id} --approve|--deny",
    }

    assert related(pending) == {"flow-run": f"prefect.flow-run.{first.flow_run_id}"}
    assert pending.payload["status"] == "pending" and pending.payload["error"] is None
    assert pending.payload["metrics"]["turns"] == 1
    assert pending.payload["request"]["id"] == f"{session_id}.0.1"
    assert pending.payload["request"]["prompt"] == "May I launch R1?"

    assert related(completed) == {"flow-run": f"prefect.flow-run.{resumed.flow_run_id}"}
    assert completed.payload["status"] == "completed" and "request" not in completed.payload
    assert completed.payload["metrics"]["replayed_turns"] == 1
    assert completed.payload["metrics"]["replayed_tool_calls"] == 2


@pytest.mark.slow
async def test_an_approved_call_that_fails_emits_one_tool_failed_and_its_replay_none(session_id):
    call = {"tool_calls": [{"name": "detonate", "arguments": {"target": "R4"}}]}
    async with await Toolkit.load(tools=[detonate]) as toolkit:
        first = await create_in_process_client(ScriptedModel([call])).run("go", toolkit, session_id=session_id)
        assert first.status == "pending", first.error
        # No reply for the turn after the approved call failed: the run fails, and a third replays it.
        approved = await create_in_process_client(ScriptedModel([call])).resume(
            session_id, Answer(id=first.request.id, ok=True), toolkit
        )
        assert approved.status == "failed"
        replay = await create_in_process_client(ScriptedModel([call, "done"])).run("go", toolkit, session_id=session_id)
    assert replay.status == "completed", replay.error
    assert replay.metrics.replayed_tool_calls == 1

    events = await events_of(session_id, expected=5)
    assert [event.event for event in events] == [
        "nexusflow.suspension.requested",
        "nexusflow.run.pending",
        "nexusflow.tool.failed",
        "nexusflow.run.failed",
        "nexusflow.run.completed",
    ], "the approved call's live failure emits once; its replay emits nothing"
    failed = events[2]
    assert related(failed) == {
        "flow-run": f"prefect.flow-run.{approved.flow_run_id}",
        "tool": "nexusflow.tool.detonate",
    }
    assert failed.payload == {
        "step": 0,
        "tool": "detonate",
        "arguments": '{"target": "R4"}',
        "error": 'error: tool "detonate" raised RuntimeError: R4 is out of range',
    }


@pytest.mark.slow
async def test_a_failed_run_emits_its_error(session_id):
    model = ScriptedModel([{"tool_calls": [{"name": "launch", "arguments": {"rocket": "R2"}}]}] * 2)
    async with await Toolkit.load(tools=[launch]) as toolkit:
        client = create_in_process_client(model, max_turns=1)
        result = await client.run("go", toolkit, session_id=session_id)
    assert result.status == "failed"
    (event,) = await events_of(session_id, expected=1)
    assert event.event == "nexusflow.run.failed"
    assert event.payload["status"] == "failed" and event.payload["error"] == result.error
    assert event.payload["metrics"]["turns"] == 1


class Inbox(BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Inbox.received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
async def test_a_run_its_budget_stopped_emits_budget_exceeded(session_id):
    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    usage = {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.02}
    client = create_in_process_client(
        lambda request: {"tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}], "usage": usage},
        max_cost_usd=0.03,
    )
    result = await client.run("go", Toolkit([weather]), session_id=session_id)
    assert result.error_type == "BudgetExceeded", result.error
    events = await events_of(session_id, expected=2)
    assert [event.event for event in events] == ["nexusflow.run.failed", "nexusflow.budget.exceeded"]
    assert events[1].payload == {"error": f"budget: session {session_id} spent $0.04 of $0.03 (max_cost_usd)"}
    assert events[0].payload["metrics"]["usage"]["cost_usd"] == pytest.approx(0.04)


@pytest.mark.slow
async def test_the_readme_automation_notifies_when_a_run_waits(session_id):
    inbox = HTTPServer(("127.0.0.1", 0), Inbox)
    threading.Thread(target=inbox.serve_forever, daemon=True).start()
    snippet = block("approval-automation").replace(
        "https://chat.example.com/hooks/approvals", f"http://127.0.0.1:{inbox.server_port}/approvals"
    )
    try:
        created = subprocess.run(
            [sys.executable, "-c", snippet], capture_output=True, text=True, timeout=300, env=os.environ.copy()
        )
        assert created.returncode == 0, created.stderr[-3000:]

        model = ScriptedModel([{"tool_calls": [{"name": "launch", "arguments": {"rocket": "R3"}}]}])
        async with await Toolkit.load(tools=[launch]) as toolkit:
            result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
        assert result.status == "pending"

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any(session_id in str(item) for item in Inbox.received):
            await anyio.sleep(0.5)
        (notice,) = [item for item in Inbox.received if session_id in str(item)]
        assert notice == {
            "text": f"Approval needed: May I launch R3? (session {session_id}); "
            f"answer with: nexusflow answer {session_id} --approve|--deny"
        }
    finally:
        inbox.shutdown()
        async with get_client() as client:
            for automation in await client.read_automations_by_name("nexusflow: a run waits for approval"):
                await client.delete_automation(automation.id)


@pytest.mark.slow
async def test_a_spent_quota_emits_quota_exhausted_with_its_reset_and_what_happened(session_id):
    """An in-process model may say its quota is spent too; the run fails (the default policy)."""
    reset = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)

    def spent(request: object) -> str:
        raise QuotaExhausted("my-api", reset, "monthly tokens used up")

    result = await create_in_process_client(spent).run("go", session_id=session_id)
    assert result.error_type == "QuotaExhausted", result.error
    assert result.error == f"quota: my-api limit reached (resets {reset.isoformat()}): monthly tokens used up"
    events = await events_of(session_id, expected=2)
    assert [event.event for event in events] == ["nexusflow.quota.exhausted", "nexusflow.run.failed"]
    payload = events[0].payload
    assert (payload["style"], payload["resets_at"], payload["policy"]) == ("my-api", reset.isoformat(), "fail")
    assert payload["then"] == "the run fails"
    assert related(events[0]) == {"flow-run": f"prefect.flow-run.{result.flow_run_id}"}
