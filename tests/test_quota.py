"""A spent subscription window: recognised in each CLI's own output (the shapes below were
printed by the pinned CLIs against the scripted model server's ``quota_reached`` reply),
then failed with the pinned error, waited out, or handed to a fallback client."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from nexusflow import ModelRequest, QuotaExhausted, Toolkit, Transport, create_cli_client, create_in_process_client
from nexusflow._artifact_keys import artifact_key
from nexusflow.errors import ArgumentError
from nexusflow.flows.report import summary
from nexusflow.flows.steps import StepEntry
from nexusflow.transports.oneshot.reports import READERS
from nexusflow.transports.oneshot.style import CliStyles
from nexusflow.transports.quota import resets_at

from cli_fixtures import envelope_answer, envelope_calls, styled
from helpers.prefect_api import flow_run_logs

pytestmark = pytest.mark.anyio

CLAUDE_SPENT = json.dumps(
    {
        "type": "result", "subtype": "success", "is_error": True, "api_error_status": 429, "num_turns": 1,
        "result": "API Error: Request rejected (429) · scripted quota: usage limit reached", "total_cost_usd": 0,
        "usage": {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 0},
        "modelUsage": {},
    }
)  # fmt: skip
CODEX_SPENT = "\n".join(
    [
        '{"type":"thread.started","thread_id":"01a241b7"}',
        '{"type":"turn.started"}',
        '{"type":"error","message":"You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), '
        'visit https://chatgpt.com/settings/usage to purchase more credits or try again at 4:41 PM."}',
        '{"type":"turn.failed","error":{"message":"You’ve hit your usage limit. Upgrade to Pro '
        "(https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try "
        'again at 4:41 PM."}}',
    ]
)
CODEX_GAVE_UP = (
    '{"type":"turn.started"}\n'
    '{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}\n'
)
GEMINI_SPENT_STDERR = (
    "    at async main (file:///gemini-cli/bundle/gemini.js:17627:5) {\n  cause: {\n    code: 429,\n"
    "    message: 'scripted quota: usage limit reached',\n  },\n  status: 429\n}\n"
    + json.dumps({"session_id": "cfab", "error": {"type": "Error", "message":
                  "You have exhausted your daily quota on this model.", "code": 429}}, indent=2)
)  # fmt: skip
COPILOT_SPENT = (
    '{"type":"session.error","data":{"errorType":"rate_limit","message":"429 scripted quota: usage limit reached",'
    '"statusCode":429}}\n{"type":"result","exitCode":1,"usage":{"premiumRequests":0}}\n'
)
NOW = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("reader", "stdout", "stderr"),
    [
        ("claude", CLAUDE_SPENT, ""),
        ("codex", CODEX_SPENT, "WARNING: proceeding, even though we could not create PATH aliases"),
        ("codex", CODEX_GAVE_UP, ""),
        ("gemini", "", GEMINI_SPENT_STDERR),
        ("copilot", COPILOT_SPENT, ""),
    ],
    ids=["claude", "codex", "codex-gave-up", "gemini", "copilot"],
)
def test_each_cli_s_spent_quota_is_recognised(reader, stdout, stderr):
    assert READERS[reader](stdout, stderr).quota is not None


@pytest.mark.parametrize(
    ("reader", "stdout", "stderr"),
    [
        ("claude", json.dumps({"type": "result", "is_error": True, "api_error_status": 400, "result": "400"}), ""),
        ("codex", '{"type":"turn.failed","error":{"message":"scripted failure: bad request"}}', ""),
        ("gemini", "", json.dumps({"error": {"type": "Error", "message": "scripted failure", "code": 400}})),
        ("copilot", '{"type":"session.error","data":{"message":"scripted failure: bad request","statusCode":400}}', ""),
        ("claude", styled("claude", "I hit my usage limit of patience: 429 times.")["stdout"], ""),
    ],
    ids=["claude", "codex", "gemini", "copilot", "an-answer-that-mentions-it"],
)  # fmt: skip
def test_other_failures_and_answers_are_no_spent_quota(reader, stdout, stderr):
    assert READERS[reader](stdout, stderr).quota is None


def test_the_reset_time_is_read_as_the_cli_states_it():
    local = NOW.astimezone()
    assert resets_at("Claude AI usage limit reached|1765000000", NOW) == datetime.fromtimestamp(1765000000, UTC)
    assert resets_at("Quota exceeded. Please retry in 30.5s.", NOW) == NOW + timedelta(seconds=30.5)
    at = resets_at("or try again at 4:41 PM.", NOW)
    assert at is not None and at > NOW and at - NOW <= timedelta(days=1)
    assert (at.astimezone(local.tzinfo).hour, at.minute) == (16, 41), "a clock time on this machine's clock"
    earlier = local.replace(hour=(local.hour - 1) % 24, minute=0)
    said = f"resets {earlier.hour % 12 or 12}{'pm' if earlier.hour >= 12 else 'am'}"
    assert resets_at(said, NOW) == earlier.astimezone(UTC) + timedelta(days=1 if earlier < local else 0)
    assert resets_at("You have exhausted your daily quota on this model.", NOW) is None
    dated = resets_at("or try again at Dec 5th, 2026 12:20 AM.", NOW)  # codex, when the reset is another day
    assert dated is not None
    assert dated.astimezone(local.tzinfo).replace(tzinfo=None) == datetime(2026, 12, 5, 0, 20)


@pytest.mark.usefixtures("prefect_server")
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


@pytest.mark.usefixtures("prefect_server")
async def test_a_reset_further_off_than_max_quota_wait_fails_at_once(fake, session_id):
    fake.script({"stdout": CODEX_SPENT, "exit": 1})
    client = create_cli_client(CliStyles.CODEX, fake.command, "gpt-5", on_quota="wait", max_quota_wait=60)
    result = await client.run("go", session_id=session_id)
    assert result.status == "failed" and result.error_type == "QuotaExhausted"
    assert result.error is not None and result.error.startswith("quota: codex limit reached (resets 20")


@pytest.mark.usefixtures("prefect_server")
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


@pytest.mark.usefixtures("prefect_server")
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


def test_the_summary_names_the_fallback_that_answered():
    from nexusflow import RunResult

    entries = [
        StepEntry("turn", "turn-0", "Completed", 0.1, False, None, "codex"),
        StepEntry("turn", "turn-1", "Completed", 0.1, False, None),
    ]
    table = summary(RunResult(status="completed", session_id="s"), entries)
    assert "| turn-0 (answered by codex) |" in table
    assert "| turn-1 |" in table


def test_a_fallback_that_is_not_a_client_is_refused_in_one_line():
    with pytest.raises(ArgumentError, match="^create_in_process_client: fallback: expected clients"):
        create_in_process_client(lambda request: "x", fallback=["codex"])
    with pytest.raises(ArgumentError, match="on_quota"):
        create_in_process_client(lambda request: "x", on_quota="retry")


def test_the_error_survives_a_round_trip_through_pickle():
    import pickle

    exc = QuotaExhausted("codex", NOW, "You've hit your usage limit.")
    again = pickle.loads(pickle.dumps(exc))
    assert (str(again), again.resets_at, again.style) == (str(exc), NOW, "codex")
    assert str(exc) == "quota: codex limit reached (resets 2026-12-04T15:00:00+00:00): You've hit your usage limit."


@pytest.mark.usefixtures("prefect_server")
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


@pytest.mark.usefixtures("prefect_server")
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


@pytest.mark.usefixtures("prefect_server")
async def test_an_acp_rate_limit_that_is_no_spent_window_stays_an_acp_error(agent, session_id):
    agent.script([[{"error": "Rate limit reached for requests"}]])
    client = create_cli_client(agent.style, agent.command, transport=Transport.ACP, env=agent.env)
    result = await client.run("go", session_id=session_id)
    assert result.error_type == "RemoteError", result.error
