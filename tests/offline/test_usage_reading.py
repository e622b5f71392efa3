"""Usage and cost as read and shown: each CLI's own JSON output (the shapes below were printed
by the pinned CLIs against the scripted model server) gives what it reports and nothing more,
an in-process model's OpenAI-style usage is read, figures add up with unknown kept unknown,
and the summary and the README's block show them. Through runs, on the server:
tests/server/operator/test_usage.py."""

import json

import pytest

from nexusflow import ModelReply, ModelRequest, Usage
from nexusflow.errors import CliError
from nexusflow.flows.report import summary
from nexusflow.messages import RunMetrics, RunResult
from nexusflow.transports.oneshot.reports import READERS
from nexusflow.transports.oneshot.style import CliStyles, builtin_style
from nexusflow.transports.oneshot.transport import CliConfig, CliTransport

from cli_fixtures import CLAUDE_MODEL_ERROR
from helpers.docs import block_marked

pytestmark = pytest.mark.anyio

CLAUDE = (
    '{"type":"result","subtype":"success","is_error":false,"result":"Hello there.","total_cost_usd":0.000175,'
    '"usage":{"input_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":2,"output_tokens":5,'
    '"server_tool_use":{"web_search_requests":0}},"modelUsage":{"scripted-model":{"inputTokens":10,'
    '"outputTokens":5,"costUSD":0.000175}}}'
)
CODEX = "\n".join(
    [
        '{"type":"thread.started","thread_id":"01a24106"}',
        '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata not found."}}',
        '{"type":"turn.started"}',
        '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"Hello there."}}',
        '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,"cache_write_input_tokens":0,'
        '"output_tokens":5,"reasoning_output_tokens":0}}',
    ]
)
CODEX_FAILED = (
    '{"type":"turn.started"}\n'
    '{"type":"turn.failed","error":{"message":"{\\"error\\":{\\"message\\":\\"scripted failure: bad request\\",'
    '\\"type\\":\\"invalid_request_error\\"}}"}}\n'
)
GEMINI = json.dumps(
    {
        "response": "Hello there.",
        "stats": {
            "models": {
                "scripted-model": {
                    "tokens": {"input": 8, "prompt": 10, "candidates": 5, "total": 15, "cached": 2, "thoughts": 0}
                }
            }
        },
    }
)
GEMINI_FAILED_STDERR = (
    "    at async Turn.run (file:///gemini-cli/bundle/chunk.js:333001:24) {\n  status: 400\n}\n"
    + json.dumps({"session_id": "c6", "error": {"type": "Error", "message": '{"error":{"code":400,"message":'
                  '"scripted failure: bad request"}}', "code": 400}}, indent=2)
)  # fmt: skip
OPENCODE_FAILED = '{"type":"error","error":{"name":"APIError","data":{"message":"scripted failure: bad request"}}}'
COPILOT = "\n".join(
    [
        '{"type":"session.tools_updated","data":{"model":"scripted-model"},"ephemeral":true}',
        '{"type":"assistant.message","data":{"messageId":"af36","model":"scripted-model","content":"Hello there.",'
        '"toolRequests":[]}}',
        '{"type":"result","exitCode":0,"usage":{"premiumRequests":0,"totalApiDurationMs":41}}',
    ]
)
OPENCODE = "\n".join(
    [
        '{"type":"step_start","part":{"type":"step-start"}}',
        '{"type":"text","part":{"type":"text","text":"Hello there."}}',
        '{"type":"step_finish","part":{"type":"step-finish","reason":"stop","tokens":{"total":15,"input":10,'
        '"output":5,"reasoning":0,"cache":{"write":1,"read":2}},"cost":0}}',
    ]
)
GOOSE = json.dumps(
    {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Say hello."}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Hello there."}],
                "metadata": {"inference": {"provider": "openai", "requestedModel": "scripted-model"}},
            },
        ],
        "metadata": {"total_tokens": 15, "input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0},
    }
)


@pytest.mark.parametrize(
    ("reader", "stdout", "text", "usage"),
    [
        ("claude", CLAUDE, None, Usage(input_tokens=10, output_tokens=5, cache_read_tokens=2, cache_write_tokens=3,
                                       cost_usd=0.000175, model="scripted-model")),
        ("codex", CODEX, None, Usage(input_tokens=10, output_tokens=5, cache_read_tokens=4, cache_write_tokens=0)),
        ("gemini", GEMINI, None, Usage(input_tokens=10, output_tokens=5, cache_read_tokens=2, model="scripted-model")),
        ("copilot", COPILOT, "Hello there.", Usage(model="scripted-model")),
        ("opencode", OPENCODE, "Hello there.", Usage(input_tokens=10, output_tokens=5, cache_read_tokens=2,
                                                     cache_write_tokens=1, cost_usd=0.0)),
        ("goose", GOOSE, "Hello there.", Usage(input_tokens=10, output_tokens=5, cache_read_tokens=0,
                                               model="scripted-model")),
    ],
)  # fmt: skip
def test_each_cli_s_json_output_gives_what_it_reports_and_nothing_more(reader, stdout, text, usage):
    reported = READERS[reader](stdout, "")
    assert reported.usage == usage
    assert reported.text == text
    assert reported.error is None


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("stdout", ["", "plain text\n", "[1, 2]", '{"usage": "lots", "total_cost_usd": -1}', "{"])
def test_output_that_is_not_the_cli_s_json_reports_nothing_and_never_raises(reader, stdout):
    reported = READERS[reader](stdout, "not json either")
    assert reported.usage == Usage()
    assert reported.text is None or reported.text == ""


@pytest.mark.parametrize(
    ("reader", "stdout", "stderr"),
    [
        ("codex", CODEX_FAILED, "WARNING: proceeding, even though we could not create PATH aliases"),
        ("gemini", "", GEMINI_FAILED_STDERR),
        ("copilot", '{"type":"session.error","data":{"message":"scripted failure: bad request","statusCode":400}}', ""),
        ("opencode", OPENCODE_FAILED, ""),
        ("claude", CLAUDE_MODEL_ERROR["stdout"], CLAUDE_MODEL_ERROR["stderr"]),  # 2.1.332: a diagnostic on stderr
    ],
)  # fmt: skip
def test_a_failure_stated_in_the_json_output_is_the_error_message(reader, stdout, stderr):
    assert READERS[reader](stdout, stderr).error is not None
    assert "scripted failure: bad request" in str(READERS[reader](stdout, stderr).error)


def test_usage_adds_known_figures_and_keeps_unknown_ones_unknown():
    total = Usage(input_tokens=10, cost_usd=0.5) + Usage(output_tokens=3) + Usage()
    assert total == Usage(input_tokens=10, output_tokens=3, cost_usd=0.5)
    assert Usage() + Usage() == Usage()
    assert Usage().shown() == "tokens ? in / ? out · cost $?"
    assert Usage(input_tokens=0, output_tokens=0, cost_usd=0).shown() == "tokens 0 in / 0 out · cost $0"


def test_an_in_process_model_s_openai_style_usage_is_read():
    assert ModelReply.model_validate({"content": "x", "usage": {"prompt_tokens": 7, "completion_tokens": 2}}).usage == (
        Usage(input_tokens=7, output_tokens=2)
    )


async def test_a_cli_answer_that_lacks_its_json_is_refused_precisely(fake):
    fake.script({"stdout": "Hello, in plain text\n"})
    request = ModelRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "tools": []})
    transport = CliTransport(CliConfig(style=builtin_style(CliStyles.COPILOT), command=fake.command))
    with pytest.raises(CliError, match="^cli: expected JSON output with a 'assistant.message' field, got: Hello"):
        await transport.generate(request)


def test_the_summary_shows_usage_per_turn_and_unknown_figures_as_such():
    from nexusflow.flows.steps import StepEntry

    metrics = RunMetrics(
        turns=2, usage=Usage(input_tokens=10, output_tokens=5, cost_usd=0.0002), turns_without_usage=1, models=["m"]
    )
    entries = [
        StepEntry("turn", "turn-0", "Completed", 1.0, False, Usage(input_tokens=10, output_tokens=5, cost_usd=0.0002)),
        StepEntry("turn", "turn-1", "Completed", 1.0, False, Usage()),
    ]
    text = summary(RunResult(status="completed", session_id="s", metrics=metrics), entries)
    assert "| 1 | turn | turn-0 | Completed | 1.00 | no | tokens 10 in / 5 out · cost $0.0002 |" in text
    assert "| 2 | turn | turn-1 | Completed | 1.00 | no | tokens ? in / ? out · cost $? |" in text
    assert "| turns that reported no tokens / no cost | 1 / 0 |" in text


def test_the_readme_s_usage_block_runs_on_a_result(capsys):
    block = block_marked("tests/offline/test_usage_reading.py runs it on one")
    metrics = RunMetrics(usage=Usage(input_tokens=20, output_tokens=10), replayed_usage=Usage(input_tokens=5))
    exec(block, {"result": RunResult(status="completed", session_id="s", metrics=metrics)})
    assert capsys.readouterr().out == "20 10 None\ntokens 5 in / ? out · cost $?\n"
