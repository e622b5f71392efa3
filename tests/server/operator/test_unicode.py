"""A lone surrogate (what a JSON escape such as "\\ud83d" decodes into) never crashes a run with
an unrelated ``UnicodeEncodeError``: through a real run, in a prompt, tool-call arguments, a
tool result or a CLI reply, it arrives repaired into U+FFFD. The repair in the models
themselves is tested without a server (tests/offline/test_surrogate_repair.py)."""

import json

import pytest

from nexusflow import (
    CliStyles,
    ModelRequest,
    Toolkit,
    Transport,
    create_cli_client,
    create_in_process_client,
    tool,
)
from nexusflow.testing import ScriptedModel
from nexusflow.transports.oneshot import REQUEST_MARKER

from cli_fixtures import envelope_answer, styled
from surrogates import FFFD, LONE

received: list[str] = []


@tool
def echo(text: str) -> str:
    """Say it back."""
    received.append(text)
    return f"echo: {text}"


@tool
def broken() -> str:
    """Returns half an emoji."""
    return f"half {LONE} emoji"


@tool
def broken_list() -> list[str]:
    """Returns half an emoji inside JSON."""
    return ["half", LONE]


def tool_contents(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    received.clear()


@pytest.mark.anyio
async def test_a_prompt_with_a_lone_surrogate_completes(session_id):
    model = ScriptedModel([lambda request: "read: " + request.messages[-1].content])
    result = await create_in_process_client(model).run(f"hi {LONE}", session_id=session_id)
    assert result.status == "completed", result.error
    assert model.requests[0].messages[-1].content == f"hi {FFFD}"
    assert result.text == f"read: hi {FFFD}"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "arguments", [{"text": LONE}, '{"text": "\\ud83d"}', '{"text": "' + LONE + '"}'], ids=["object", "escaped", "raw"]
)
async def test_tool_call_arguments_with_a_lone_surrogate_reach_the_tool_repaired(arguments, session_id):
    model = ScriptedModel(
        [{"tool_calls": [{"name": "echo", "arguments": arguments}]}, lambda request: tool_contents(request)[0]]
    )
    async with await Toolkit.load(tools=[echo]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert received == [FFFD]
    assert result.text == f"echo: {FFFD}"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "expected"), [("broken", f"half {FFFD} emoji"), ("broken_list", f'["half","{FFFD}"]')]
)
async def test_a_tool_result_with_a_lone_surrogate_completes(name, expected, session_id):
    model = ScriptedModel([{"tool_calls": [{"name": name}]}, lambda request: tool_contents(request)[0]])
    async with await Toolkit.load(tools=[broken, broken_list]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == expected
    assert result.metrics.tool_errors == 0


@pytest.mark.anyio
async def test_a_cli_reply_with_an_escaped_lone_surrogate_reaches_the_next_launch_repaired(fake, session_id):
    fake.script(
        styled("opencode", '{"tool_calls": [{"name": "echo", "arguments": "{\\"text\\": \\"\\\\ud83d\\"}"}]}'),
        styled("opencode", envelope_answer("done")),
    )
    client = create_cli_client(style=CliStyles.OPENCODE, command=fake.command, transport=Transport.CLI)
    async with await Toolkit.load(tools=[echo]) as toolkit:
        result = await client.run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "done"
    assert received == [FFFD]
    _, second = fake.calls()
    body = json.loads(second["stdin"].split(REQUEST_MARKER, 1)[1])
    assistant, tool_message = body["messages"][-2:]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"text": FFFD}
    assert tool_message["content"] == f"echo: {FFFD}"
