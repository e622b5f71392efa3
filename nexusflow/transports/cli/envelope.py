"""Tool calling through a text-only CLI: the request goes in verbatim under a preamble, and
the reply is parsed tolerantly of form and strictly of meaning.

Tolerant of form: code fences, prose around the JSON, ``choices[0].message`` and
``message`` wrappers, arguments as a JSON string or an object. Strict of meaning: what the
message contains wins over what it declares (tool calls beat ``"kind": "answer"``), and a
reply that tries to be an envelope but is malformed is a ``Complaint`` to send back, never
plain content. Only a reply with no JSON object at all is a final answer as it stands.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ...messages import ModelReply, ModelRequest, ToolCall

PREAMBLE = """\
You are the model behind a tool-calling agent. Below, after REQUEST:, is a chat-completions request as JSON: \
its "messages" are the conversation so far and its "tools" are the only tools you may call. Answer its last message.
Reply with exactly one JSON object and nothing else:
- to call tools: {"tool_calls": [{"id": "call_1", "name": "<a name from tools>", \
"arguments": {<matching the tool's parameters>}}]}
- to give the final answer: {"content": "<your answer>"}
Calls in one reply run in parallel; their results come back as "tool" messages with the matching "tool_call_id".
Honour every other key of the request (tool_choice, response_format, ...). Do not use tools of your own: \
no shell, no file edits, no web access."""

REQUEST_MARKER = "\nREQUEST:\n"

REPAIR = """

YOUR PREVIOUS REPLY WAS REJECTED: {complaint}
Reply again with exactly one JSON object as described above."""


def request_json(request: ModelRequest) -> str:
    """The request body as sent to the CLI: every key, nothing re-rendered."""
    return json.dumps(request.body(), ensure_ascii=False)


def render(request: ModelRequest, complaint: str | None = None) -> str:
    prompt = PREAMBLE + REQUEST_MARKER + request_json(request)
    if complaint is not None:
        prompt += REPAIR.format(complaint=complaint)
    return prompt


@dataclass(frozen=True)
class Complaint:
    """Why a reply that tried to be an envelope was refused; sent back to the model."""

    message: str


_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n(.*?)```", re.DOTALL)
_ENVELOPE_KEYS = ("tool_calls", "content", "kind")


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object found in the text: fenced blocks first, then the whole text, then
    each ``{`` that starts a complete object (prose around JSON)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    candidates = [block.strip() for block in _FENCE.findall(text)] + [text.strip()]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            found.append(value)
    if found:
        return found
    for index, char in enumerate(text):
        if char == "{":
            try:
                value, _ = decoder.raw_decode(text, index)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found


def _unwrap(value: dict[str, Any]) -> dict[str, Any]:
    choices = value.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return message
    message = value.get("message")
    if isinstance(message, dict) and any(key in message for key in _ENVELOPE_KEYS):
        return message
    return value


def _envelope(text: str) -> dict[str, Any] | None:
    for value in _json_objects(text):
        unwrapped = _unwrap(value)
        if any(key in unwrapped for key in _ENVELOPE_KEYS):
            return unwrapped
    return None


def _call(index: int, raw: Any, tools: set[str]) -> ToolCall | Complaint:
    where = f"tool_calls[{index}]"
    if not isinstance(raw, dict):
        return Complaint(f"{where} must be an object with a name and arguments")
    nested = raw.get("function")
    function: dict[str, Any] = nested if isinstance(nested, dict) else raw
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return Complaint(f"{where} has no name")
    if name not in tools:
        listed = ", ".join(sorted(tools)) or "none"
        return Complaint(f'{where} calls unknown tool "{name}" (tools: {listed})')
    arguments = function.get("arguments", {})
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return Complaint(f'{where} ("{name}"): arguments are not valid JSON: {exc.msg}')
    if not isinstance(arguments, dict):
        return Complaint(f'{where} ("{name}"): arguments must be a JSON object')
    call_id = raw.get("id")
    call_id = call_id if isinstance(call_id, str) and call_id else None
    return ToolCall.model_validate({"id": call_id, "name": name, "arguments": arguments})


def parse_reply(text: str, tools: set[str]) -> ModelReply | Complaint:
    """Read one CLI reply. ``tools`` are the names the request offered."""
    envelope = _envelope(text)
    if envelope is None:
        if '"tool_calls"' in text:
            return Complaint('the reply mentions "tool_calls" but holds no valid JSON object')
        return ModelReply(content=text.strip())
    calls = envelope.get("tool_calls")
    content = envelope.get("content")
    if calls is not None:
        if not isinstance(calls, list):
            return Complaint("tool_calls must be a list")
        parsed: list[ToolCall] = []
        for index, raw in enumerate(calls):
            call = _call(index, raw, tools)
            if isinstance(call, Complaint):
                return call
            parsed.append(call)
        if parsed:
            return ModelReply(content=content if isinstance(content, str) and content else None, tool_calls=parsed)
    if content is None:
        return Complaint('the reply has no tool calls and no "content"')
    if isinstance(content, str):
        return ModelReply(content=content)
    return ModelReply(content=json.dumps(content, ensure_ascii=False))
