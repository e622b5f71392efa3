"""The reply parser: tolerant of form, strict of meaning."""

import json

import pytest

from nexusflow import ModelReply, ModelRequest
from nexusflow.transports.cli import PREAMBLE, REQUEST_MARKER, Complaint, parse_reply, render

TOOLS = {"add", "search"}


def reply(text: str) -> ModelReply:
    parsed = parse_reply(text, TOOLS)
    assert isinstance(parsed, ModelReply), parsed
    return parsed


def complaint(text: str) -> str:
    parsed = parse_reply(text, TOOLS)
    assert isinstance(parsed, Complaint), parsed
    return parsed.message


def test_plain_text_is_the_final_answer():
    assert reply("The answer is 5.\n").content == "The answer is 5."


def test_a_json_object_that_is_not_an_envelope_is_the_answer_text():
    assert reply('{"total": 5}').content == '{"total": 5}'


def test_content_envelope_keeps_the_text_exactly():
    text = 'line "one"\n- two <>& é'
    assert reply(json.dumps({"content": text})).content == text


def test_declared_answer_with_tool_calls_runs_the_calls():
    parsed = reply(
        json.dumps({"kind": "answer", "content": "done", "tool_calls": [{"name": "add", "arguments": {"a": 1}}]})
    )
    assert [c.name for c in parsed.tool_calls] == ["add"]


def test_string_arguments_are_decoded():
    parsed = reply(json.dumps({"tool_calls": [{"id": "c9", "name": "add", "arguments": '{"a": 1, "b": 2}'}]}))
    assert parsed.tool_calls[0].id == "c9"
    assert json.loads(parsed.tool_calls[0].arguments) == {"a": 1, "b": 2}


def test_fenced_json_inside_prose_is_parsed():
    text = 'Sure, I will call it.\n```json\n{"tool_calls": [{"name": "search", "arguments": {"q": "x"}}]}\n```\nThanks.'
    assert reply(text).tool_calls[0].name == "search"


def test_unfenced_json_inside_prose_is_parsed():
    text = 'Calling now: {"tool_calls": [{"name": "add", "arguments": {}}]} -- done'
    assert reply(text).tool_calls[0].name == "add"


@pytest.mark.parametrize(
    "wrapped",
    [
        {"choices": [{"message": {"role": "assistant", "tool_calls": [{"name": "add", "arguments": {}}]}}]},
        {"message": {"tool_calls": [{"type": "function", "function": {"name": "add", "arguments": "{}"}}]}},
    ],
)
def test_openai_wrappers_are_unwrapped(wrapped):
    assert reply(json.dumps(wrapped)).tool_calls[0].name == "add"


def test_a_call_without_id_gets_one():
    assert reply(json.dumps({"tool_calls": [{"name": "add"}]})).tool_calls[0].id.startswith("call_")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"tool_calls": {"name": "add"}}', "tool_calls must be a list"),
        ('{"tool_calls": [{"arguments": {}}]}', "tool_calls[0] has no name"),
        (
            '{"tool_calls": [{"name": "add", "arguments": "{oops"}]}',
            'tool_calls[0] ("add"): arguments are not valid JSON',
        ),
        (
            '{"tool_calls": [{"name": "add", "arguments": [1]}]}',
            'tool_calls[0] ("add"): arguments must be a JSON object',
        ),
        (
            '{"tool_calls": [{"name": "rm_rf", "arguments": {}}]}',
            'tool_calls[0] calls unknown tool "rm_rf" (tools: add, search)',
        ),
        ('{"tool_calls": [], "kind": "answer"}', 'the reply has no tool calls and no "content"'),
        (
            '{"tool_calls": [{"name": "add", "arguments": {"a": 1}}',
            'the reply mentions "tool_calls" but holds no valid JSON object',
        ),
    ],
)
def test_malformed_envelopes_are_complaints_never_content(text, message):
    assert complaint(text).startswith(message)


def test_render_is_preamble_marker_and_the_body_verbatim():
    request = ModelRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], "tools": [], "x_new": {"k": [1, None]}}
    )
    assert render(request) == PREAMBLE + REQUEST_MARKER + json.dumps(request.body(), ensure_ascii=False)
    repaired = render(request, complaint="tool_calls must be a list")
    assert repaired.startswith(render(request))
    assert "YOUR PREVIOUS REPLY WAS REJECTED: tool_calls must be a list" in repaired
