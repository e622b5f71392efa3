import json

import pytest

from nexusflow import ModelReply, ModelRequest, ToolCall
from nexusflow.errors import ModelError
from nexusflow.transports import coerce_reply


def test_tool_call_keeps_a_pre_encoded_arguments_string_verbatim():
    raw = '{"b": 2,   "a": "é"}'
    call = ToolCall.model_validate({"id": "c1", "name": "add", "arguments": raw})
    assert call.arguments == raw
    assert call.model_dump()["function"]["arguments"] == raw
    assert call.parsed_arguments() == {"b": 2, "a": "é"}


def test_tool_call_accepts_the_openai_shape_and_an_object():
    call = ToolCall.model_validate({"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}})
    assert call.name == "f" and json.loads(call.arguments) == {"x": 1}


def test_a_call_without_id_gets_a_unique_one():
    reply = coerce_reply({"tool_calls": [{"name": "f", "arguments": {}}, {"name": "g"}]})
    ids = [c.id for c in reply.tool_calls]
    assert all(ids) and len(set(ids)) == 2
    assert reply.tool_calls[1].arguments == "{}"


def test_parsed_arguments_rejects_a_non_object():
    with pytest.raises(ValueError, match="JSON object"):
        ToolCall(name="f", arguments="[1, 2]").parsed_arguments()


def test_request_carries_unknown_body_keys_untouched():
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_object"},
        "x_future": {"nested": [1, None, "z"]},
    }
    request = ModelRequest.model_validate(body)
    assert request.body() == body


def test_assistant_tool_calls_serialize_in_openai_shape():
    request = ModelRequest.model_validate(
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            ]
        }
    )
    assistant = request.body()["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }


def test_usage_accepts_openai_names():
    reply = ModelReply.model_validate({"content": "x", "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (3, 4)


@pytest.mark.parametrize("value", [42, {"tool_calls": "nope"}, {"tool_calls": [{"arguments": {}}]}])
def test_invalid_replies_are_model_errors(value):
    with pytest.raises(ModelError, match="model: invalid reply"):
        coerce_reply(value)
