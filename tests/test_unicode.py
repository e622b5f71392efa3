"""A lone surrogate (what a JSON escape such as "\\ud83d" decodes into) is repaired into
U+FFFD wherever text crosses a boundary, so it never crashes a run with an unrelated
``UnicodeEncodeError``: not in a prompt, tool-call arguments, a tool result or a CLI reply."""

import json

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from nexusflow import (
    CliStyles,
    ModelReply,
    ModelRequest,
    ToolCall,
    Toolkit,
    ToolResult,
    Transport,
    create_cli_client,
    create_in_process_client,
    tool,
)
from nexusflow.messages import RunResult, UserMessage
from nexusflow.testing import ScriptedModel
from nexusflow.transports.oneshot import REQUEST_MARKER

from cli_fixtures import envelope_answer, styled

LONE = "\ud83d"
FFFD = "\ufffd"

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


# ---- the models ---------------------------------------------------------------------------


def test_a_plain_str_field_cannot_be_dumped_as_json_but_a_message_can():
    class Plain(BaseModel):
        content: str

    with pytest.raises(PydanticSerializationError, match="surrogates not allowed"):
        Plain(content=f"a{LONE}b").model_dump_json()
    message = UserMessage(content=f"a{LONE}b")
    assert message.content == f"a{FFFD}b"
    assert json.loads(message.model_dump_json()) == {"role": "user", "content": f"a{FFFD}b"}


def test_every_text_field_is_repaired():
    reply = ModelReply.model_validate(
        {
            "content": LONE,
            "tool_calls": [
                {"id": f"c{LONE}", "name": "echo", "arguments": {"text": LONE}},
                {"id": "c2", "name": "echo", "arguments": '{"text": "' + LONE + '"}'},
            ],
        }
    )
    assert reply.content == FFFD
    assert [c.id for c in reply.tool_calls] == [f"c{FFFD}", "c2"]
    assert [c.parsed_arguments() for c in reply.tool_calls] == [{"text": FFFD}] * 2
    assert ToolResult(content=LONE).content == FFFD
    assert RunResult(status="failed", session_id="s", text=LONE, error=LONE).model_dump_json()
    request = ModelRequest.model_validate({"messages": [{"role": "tool", "tool_call_id": "c", "content": LONE}]})
    assert "\ufffd".encode() in json.dumps(request.body(), ensure_ascii=False).encode()


def test_an_escaped_lone_surrogate_in_a_pre_encoded_string_is_kept_verbatim_and_repaired_when_parsed():
    call = ToolCall(name="echo", arguments='{"text": "\\ud83d"}')
    assert call.arguments == '{"text": "\\ud83d"}'
    assert call.parsed_arguments() == {"text": FFFD}


@pytest.mark.parametrize(
    ("text", "repaired"),
    [
        ("plain ascii", "plain ascii"),
        ("é中文🙂", "é中文🙂"),
        (f"{LONE}", FFFD),
        ("\udc00tail", f"{FFFD}tail"),
        ("a\ud83d\ude00b", "a\U0001f600b"),
        (f"{LONE}{LONE}", FFFD * 2),
    ],
)
def test_lone_surrogates_become_u_fffd_and_a_split_pair_its_character(text, repaired):
    assert UserMessage(content=text).content == repaired


def test_text_without_a_surrogate_is_returned_as_is():
    from nexusflow.messages import repair_text  # imported here so the other tests run on older versions

    for text in ("x" * 1000, "é" * 1000, "🙂" * 1000):
        assert repair_text(text) is text


# ---- through a real run ---------------------------------------------------------------------


@pytest.mark.usefixtures("prefect_server")
@pytest.mark.anyio
async def test_a_prompt_with_a_lone_surrogate_completes(session_id):
    model = ScriptedModel([lambda request: "read: " + request.messages[-1].content])
    result = await create_in_process_client(model).run(f"hi {LONE}", session_id=session_id)
    assert result.status == "completed", result.error
    assert model.requests[0].messages[-1].content == f"hi {FFFD}"
    assert result.text == f"read: hi {FFFD}"


@pytest.mark.usefixtures("prefect_server")
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


@pytest.mark.usefixtures("prefect_server")
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


@pytest.mark.usefixtures("prefect_server")
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
