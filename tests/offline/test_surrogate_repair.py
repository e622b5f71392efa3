"""A lone surrogate (what a JSON escape such as "\\ud83d" decodes into) is repaired into
U+FFFD by the models wherever text crosses a boundary (a message, a reply, a tool call, a
tool result, a run's result), and a split pair into its character; text without one is
returned as is. Runs that carry one: tests/server/operator/test_unicode.py."""

import json

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from nexusflow import ModelReply, ModelRequest, ToolCall, ToolResult
from nexusflow.messages import RunResult, UserMessage

from surrogates import FFFD, LONE


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
