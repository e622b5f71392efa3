"""A spent subscription window read with no server: recognised in each CLI's own output (the
shapes below were printed by the pinned CLIs against the scripted model server's
``quota_reached`` reply), its reset time read as the CLI states it; the summary naming the
fallback that answered, a fallback that is no client refused, the error surviving pickle. The
runs that meet one are tests/server/run/test_quota.py."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from nexusflow import QuotaExhausted, create_in_process_client
from nexusflow.errors import ArgumentError
from nexusflow.flows.report import summary
from nexusflow.flows.steps import StepEntry
from nexusflow.transports.oneshot.reports import READERS
from nexusflow.transports.subscription import resets_at

from cli_fixtures import CLAUDE_SPENT, CODEX_SPENT, styled

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
