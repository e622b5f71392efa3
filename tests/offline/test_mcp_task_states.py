"""How a run's state reads as a task's status (nexusflow/mcp_server/tasks.py): a run that failed
or crashed is the tool's error (``completed`` with ``isError``), never the protocol's ``failed``,
which the extension keeps for JSON-RPC errors; a run that waits for a quota's reset, not for an
answer, is ``working`` with nothing to fill in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from mcp_types import CallToolResult

from nexusflow.mcp_server.tasks import TaskRecord, _detailed
from nexusflow.mcp_server.views import RunView, WaitingFor

CREATED = datetime(2026, 12, 8, 1, 0, tzinfo=UTC)
RECORD = TaskRecord(task_id="s1.00ff", created=CREATED)


def view(**given: object) -> RunView:
    return RunView.model_validate({"session_id": "s1", "flow_run_id": "f1", "turns": 2, "tool_calls": 1, **given})


@pytest.mark.parametrize("state", ["failed", "crashed"])
def test_a_run_that_failed_or_crashed_is_a_completed_task_with_the_tools_error(state: str) -> None:
    task = _detailed(RECORD, view(state=state, error="the agent exited with 1"))
    assert task["status"] == "completed"
    result = CallToolResult.model_validate(task["result"])
    assert result.is_error
    assert result.content[0].text == "the agent exited with 1"  # type: ignore[union-attr]
    assert result.structured_content is not None and result.structured_content["state"] == state
    assert task["statusMessage"] == f"{state} after 2 turns, 1 tool calls: the agent exited with 1"


def test_a_completed_run_carries_its_answer_and_a_cancelled_one_nothing() -> None:
    done = _detailed(RECORD, view(state="completed", text="all deployed", updated=CREATED + timedelta(minutes=5)))
    assert (done["status"], done["result"]["isError"], done["result"]["content"][0]["text"]) == (
        "completed",
        False,
        "all deployed",
    )
    assert (done["createdAt"], done["lastUpdatedAt"]) == ("2026-12-08T01:00:00Z", "2026-12-08T01:05:00Z")
    cancelled = _detailed(RECORD, view(state="cancelled"))
    assert cancelled["status"] == "cancelled" and "result" not in cancelled and "inputRequests" not in cancelled


def test_a_run_waiting_for_a_quota_is_working_and_one_waiting_for_an_answer_asks_one_form() -> None:
    quota = _detailed(RECORD, view(state="waiting", waits_for="the quota's reset at 02:00"))
    assert quota["status"] == "working" and "inputRequests" not in quota
    assert quota["statusMessage"] == "waiting for the quota's reset at 02:00"
    asking = WaitingFor(request_id="r9", kind="approval", prompt="May I deploy web?", tool="deploy", arguments="{}")
    task = _detailed(RECORD, view(state="waiting", waiting=asking.model_dump()))
    assert task["status"] == "input_required"
    assert list(task["inputRequests"]) == ["r9"]
    form = task["inputRequests"]["r9"]["params"]
    assert form["message"] == "May I deploy web?\ntool: deploy {}"
    assert set(form["requestedSchema"]["properties"]) == {"approve", "data", "reason"}


def test_a_clock_without_a_zone_is_read_as_utc() -> None:
    naive = _detailed(RECORD, view(state="completed", updated=datetime(2026, 12, 8, 2, 0)))
    assert naive["lastUpdatedAt"] == "2026-12-08T02:00:00Z"
