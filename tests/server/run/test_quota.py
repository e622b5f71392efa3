"""A spent subscription window in a run on the session's server: failed with the pinned error,
waited out, handed to a fallback client, or remembered for the subscription until its reset;
an ACP agent's too. How each CLI's output is read as a spent window, with no server:
tests/offline/test_quota_reading.py."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from nexusflow import ModelRequest, Toolkit, Transport, create_cli_client, create_in_process_client
from nexusflow._prefect.artifact_keys import artifact_key
from nexusflow.transports.oneshot.style import CliStyles

from cli_fixtures import CLAUDE_SPENT, CODEX_SPENT, envelope_answer, envelope_calls, styled
from helpers.prefect_api import flow_run_logs

pytestmark = pytest.mark.anyio


async def test_a_spent_quota_fails_the_run_with_the_pinned_error(fake, session_id):
    fake.script({"stdout": CLAUDE_SPENT, "exit": 1})
    client = create_cli_client(CliStyles.CLAUDE, fake.command, "sonnet")
    result = await client.run("go", session_id=session_id)
    assert result.status == "failed" and result.error_type == "QuotaExhausted"
    assert result.error is not None
    assert result.error.startswith(
        "quota: claude limit reached (reset time unknown): API Error: Request rejected (429)"
    )
    assert len(fake.calls()) == 1, "a spent window is not retried"
    logs = await flow_run_logs(str(result.flow_run_id), "limit reached")
    assert any("quota: claude limit reached" in message and "the run fails" in message for _, message in logs)


async def test_a_reset_further_off_than_max_quota_wait_fails_at_once(fake, session_id):
    fake.script({"stdout": CODEX_SPENT, "exit": 1})
    client = create_cli_client(CliStyles.CODEX, fake.command, "gpt-5", on_quota="wait", max_quota_wait=60)
    result = await client.run("go", session_id=session_id)
    assert result.status == "failed" and result.error_type == "QuotaExhausted"
    assert result.error is not None and result.error.startswith("quota: codex limit reached (resets 20")


async def test_wait_sleeps_until_the_reset_then_goes_on_and_nothing_runs_twice(fake, session_id):
    """Turn 0 calls the tool; turn 1 meets a window that resets in 1 s: the run waits, asks
    turn 1 again and completes. The tool ran once, the first turn was not asked again."""
    ran: list[str] = []

    def note(what: str) -> str:
        """Note something."""
        ran.append(what)
        return "noted"

    spent = {"stderr": json.dumps({"error": {"message": "Quota exceeded. Please retry in 1s.", "code": 429}}),
             "exit": 1}  # fmt: skip
    fake.script(
        styled("gemini", envelope_calls({"id": "c1", "name": "note", "arguments": {"what": "x"}})),
        spent,
        styled("gemini", envelope_answer("done")),
    )
    client = create_cli_client(CliStyles.GEMINI, fake.command, "gemini-2.5-pro", on_quota="wait")
    started = datetime.now(UTC)
    result = await client.run("go", Toolkit([note]), session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "done"
    assert ran == ["x"]
    assert len(fake.calls()) == 3
    assert datetime.now(UTC) - started >= timedelta(seconds=0.8), "it waited for the reset"
    logs = await flow_run_logs(str(result.flow_run_id), "the run waits until")
    assert any("quota: gemini limit reached (resets " in message for _, message in logs)


async def test_fallback_answers_while_the_quota_is_spent_and_says_so(fake, session_id):
    """The claude client's window is spent: each turn goes to the fallback, the claude CLI
    is launched once (its reset unknown, it is not asked again this run), and the summary
    and each turn's log line name who answered."""
    fake.script({"stdout": CLAUDE_SPENT, "exit": 1})

    def backup(request: ModelRequest) -> object:
        if len(request.messages) < 3:
            return {"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]}
        return {"content": f"sum {request.messages[-1].content}"}

    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    client = create_cli_client(
        CliStyles.CLAUDE, fake.command, "sonnet", on_quota="fallback", fallback=[create_in_process_client(backup)]
    )
    result = await client.run("add 2 and 3", Toolkit([add]), session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "sum 5"
    assert len(fake.calls()) == 1
    logs = await flow_run_logs(str(result.flow_run_id), "the turn goes to the fallback in-process")
    assert any("quota: claude limit reached" in message for _, message in logs)
    key = artifact_key("summary", session_id)
    async with get_client() as prefect:
        found = await prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    table = str(found[0].data)
    assert "| turn-0 (answered by in-process) |" in table and "| turn-1 (answered by in-process) |" in table


async def test_a_subscription_found_spent_is_not_asked_again_by_any_run_before_its_reset(fake, session_id):
    """One run meets the spent window; a later run of another client naming the same
    subscription fails at once, its CLI never launched. The state is a Prefect variable."""
    from prefect.variables import Variable

    name = f"team-{session_id[-12:].lower()}"
    fake.script({"stdout": CODEX_SPENT, "exit": 1})
    first = create_cli_client(CliStyles.CODEX, fake.command, "gpt-5", limit=name, max_concurrent=2)
    met = await first.run("go", session_id=f"{session_id}-a")
    assert met.error_type == "QuotaExhausted" and len(fake.calls()) == 1
    stored = await Variable.aget(f"nexusflow-quota-{name}")
    assert isinstance(stored, dict) and stored["style"] == "codex"

    second = create_cli_client(CliStyles.CODEX, fake.command, "gpt-5", limit=name, per_minute=600)
    refused = await second.run("go again", session_id=f"{session_id}-b")
    assert refused.error_type == "QuotaExhausted", refused.error
    assert refused.error is not None and refused.error.startswith("quota: codex limit reached (resets ")
    assert f"recorded for subscription {name}" in refused.error
    assert len(fake.calls()) == 1, "the CLI was not launched again before the reset"


@pytest.mark.parametrize(
    ("error", "data", "reset"),
    [
        ("You have exhausted your daily quota on this model.", None, False),  # gemini --acp, code 429
        ("Internal error", {"message": "You’ve hit your usage limit. … or try again at 5:42 PM.",
                            "codexErrorInfo": "usageLimitExceeded"}, True),  # codex-acp
    ],
    ids=["in-the-message", "in-its-data"],
)  # fmt: skip
async def test_an_acp_agent_s_spent_quota_is_recognised(agent, session_id, error, data, reset):
    agent.script([[{"error": error, "code": 429 if data is None else -32603, "data": data}]])
    client = create_cli_client(agent.style, agent.command, transport=Transport.ACP, env=agent.env)
    result = await client.run("go", session_id=session_id)
    assert result.status == "failed" and result.error_type == "QuotaExhausted", result.error
    assert result.error is not None and result.error.startswith("quota: scripted limit reached (")
    assert ("(resets " in result.error) == reset


async def test_an_acp_rate_limit_that_is_no_spent_window_stays_an_acp_error(agent, session_id):
    agent.script([[{"error": "Rate limit reached for requests"}]])
    client = create_cli_client(agent.style, agent.command, transport=Transport.ACP, env=agent.env)
    result = await client.run("go", session_id=session_id)
    assert result.error_type == "RemoteError", result.error
