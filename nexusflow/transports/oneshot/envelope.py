"""Tool calling through a text-only CLI: the request goes in verbatim under a preamble, and
the reply is parsed tolerantly of form, strictly of meaning, and warily of where its JSON
came from.

Tolerant of form: code fences, a lead-in before the JSON or a trailer after it,
``choices[0].message`` and ``message`` wrappers, arguments as a JSON string or an object,
calls nested under ``function``. Strict of meaning: what the message contains wins over what
it declares (tool calls beat ``"kind": "answer"``), and a reply that tries to be an envelope
but is malformed is a ``Complaint`` to send back, never plain content.

Wary of provenance, because a model's prose may quote a fetched page, and a page must not
call tools by being quoted. The reply's own JSON is an object that starts the reply, ends it
or fills a code fence; one with prose on both sides is a quotation. An envelope whose calls
(name and arguments, compared as JSON values) appear in an envelope inside a tool result is a
quotation too. A reply without an envelope of its own is the final answer as it stands,
unless it mentions ``"tool_calls"`` outside every JSON object: that is a broken envelope.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...messages import Message, ModelReply, ModelRequest, ToolCall, ToolMessage, nests_deeper, repair_text
from ..errors import arguments_not_json, arguments_number_too_long, arguments_too_deep

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

OUTPUT = """
The final answer must be JSON that matches this JSON schema (the request's response_format), given as the value \
of "content": {schema}"""

REQUEST_MARKER = "\nREQUEST:\n"

REPAIR = """

YOUR PREVIOUS REPLY WAS REJECTED: {complaint}
Reply again with exactly one JSON object as described above."""

MAX_DEPTH = 64
"""JSON nesting deeper than this is not read, in a reply or a tool result: decoding it would
cost a lot, and using it could overflow the recursion limit downstream."""


def request_json(request: ModelRequest) -> str:
    """The request body as sent to the CLI: every key, nothing re-rendered, the conversation
    last. What a run keeps the same (its tools, model, output type) comes first, so each
    turn's prompt begins with the whole of the previous one but its closing brackets: what a
    provider's prefix cache reuses (tools after the messages ended the shared part where the
    conversation did)."""
    body = request.body()
    messages = body.pop("messages")
    return json.dumps({**body, "messages": messages}, ensure_ascii=False)


def render(request: ModelRequest, complaint: str | None = None) -> str:
    """The preamble, the output schema when the run has one, the request, and a complaint
    about the previous reply when it is being repaired."""
    schema = request.output_schema
    output = "" if schema is None else OUTPUT.format(schema=json.dumps(schema, ensure_ascii=False))
    prompt = PREAMBLE + output + REQUEST_MARKER + request_json(request)
    if complaint is not None:
        prompt += REPAIR.format(complaint=complaint)
    return prompt


@dataclass(frozen=True)
class Complaint:
    """Why a reply that tried to be an envelope was refused; sent back to the model."""

    message: str


_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n(.*?)```", re.DOTALL)
_OBJECT_START = re.compile(r'\{[ \t\n\r]*["}]')
_ENVELOPE_KEYS = ("tool_calls", "content", "kind")
_DECODER = json.JSONDecoder()
_WINDOW = 256
_JSON_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_UNESCAPES = 3


def _decode_at(text: str, start: int) -> tuple[dict[str, Any], int] | None:
    """The JSON object starting at ``start`` and where it ends, or None (also when it nests
    too deep or holds a number too long for ``int``). Decodes a growing window, not the rest
    of the text: a failed decode costs as much as the text before it (the error counts
    lines), so trying every brace of a large page would be quadratic."""
    size = _WINDOW
    while True:
        window = text[start : start + size]
        if size > _WINDOW and nests_deeper(window, MAX_DEPTH):
            return None
        try:
            value, end = _DECODER.raw_decode(window)
        except json.JSONDecodeError as exc:
            cut = exc.pos >= len(window) - 9 or exc.msg.startswith("Unterminated string")
            if not cut or len(window) < size:
                return None
            size *= 64
            continue
        except ValueError:
            return None
        return None if size == _WINDOW and nests_deeper(window, MAX_DEPTH) else (value, start + end)


def _objects(text: str) -> list[tuple[int, int, dict[str, Any]]]:
    """The outermost complete JSON objects in the text, each with where it starts and ends."""
    found: list[tuple[int, int, dict[str, Any]]] = []
    match = _OBJECT_START.search(text)
    while match:
        decoded = _decode_at(text, match.start())
        if decoded is None:
            match = _OBJECT_START.search(text, match.start() + 1)
            continue
        value, end = decoded
        found.append((match.start(), end, value))
        match = _OBJECT_START.search(text, end)
    return found


def _own(text: str, objects: list[tuple[int, int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The objects in the reply's own position: starting it, ending it, or alone in a fence."""
    fenced = set()
    for match in _FENCE.finditer(text):
        block = match.group(1)
        start = match.start(1) + len(block) - len(block.lstrip())
        fenced.add((start, match.end(1) - len(block) + len(block.rstrip())))
    return [value for start, end, value in objects if start == 0 or end == len(text) or (start, end) in fenced]


def _outside(text: str, objects: list[tuple[int, int, dict[str, Any]]]) -> str:
    """The text with every complete object cut out (a space in its place, so no token forms)."""
    pieces, last = [], 0
    for start, end, _ in objects:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    return " ".join(pieces)


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


def _function(raw: dict[str, Any]) -> dict[str, Any]:
    nested = raw.get("function")
    return nested if isinstance(nested, dict) else raw


def _arguments(value: Any) -> Any:
    """A call's arguments as a JSON value: a string is decoded, absent or blank is ``{}``.
    Raises ``ValueError`` with the reason for a complaint."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if not isinstance(value, str):
        return value
    if nests_deeper(value, MAX_DEPTH):
        raise arguments_too_deep(MAX_DEPTH)
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise arguments_not_json(exc) from None
    except ValueError:
        raise arguments_number_too_long() from None


def _canonical(value: Any) -> str:
    """A JSON value as comparable text: keys sorted, ``1.0`` written as ``1``, and NaN equal
    to NaN (as values they differ, which would let a page hide its call behind a NaN)."""

    def normal(item: Any) -> Any:
        if isinstance(item, float) and item.is_integer():
            return int(item)
        if isinstance(item, dict):
            return {key: normal(child) for key, child in item.items()}
        if isinstance(item, list):
            return [normal(child) for child in item]
        return item

    return json.dumps(normal(value), sort_keys=True)


def _signature(raw: Any) -> tuple[str, str] | None:
    """What identifies a call across formats: its name and its arguments as canonical JSON
    (ids, whitespace, string or object, flat or under ``function`` do not matter). Arguments
    that do not decode are compared as written."""
    if not isinstance(raw, dict):
        return None
    function = _function(raw)
    name = function.get("name")
    if not isinstance(name, str):
        return None
    arguments = function.get("arguments")
    try:
        return name, _canonical(_arguments(arguments))
    except ValueError:
        return (name, arguments) if isinstance(arguments, str) else None


def _unescape_json(text: str) -> str:
    """The text with its JSON string escapes undone, wherever they are: an envelope inside a
    JSON string comes out as plain JSON, however deep the object around the string nests."""
    return _JSON_ESCAPE.sub(lambda match: _ESCAPES.get(match[1]) or chr(int(match[1][1:], 16)), text)


def _quoted_calls(transcript: Sequence[Message]) -> set[tuple[str, str]]:
    """The calls of every envelope in the tool results, as JSON in the text or under up to
    ``_UNESCAPES`` layers of JSON string or HTML escaping (more would be an attacker's, and
    each layer costs a pass over the text)."""
    calls: set[tuple[str, str]] = set()
    pending = [(message.content, 0) for message in transcript if isinstance(message, ToolMessage)]
    seen: set[str] = set()
    while pending:
        text, layers = pending.pop()
        if text in seen:
            continue
        seen.add(text)
        if layers < _UNESCAPES:
            pending.extend((variant, layers + 1) for variant in (html.unescape(text), _unescape_json(text)))
        for _, _, found in _objects(text):
            values: list[Any] = [found]
            while values:
                value = values.pop()
                if isinstance(value, dict):
                    listed = value.get("tool_calls")
                    if isinstance(listed, list):
                        calls.update(call for call in map(_signature, listed) if call is not None)
                    values.extend(value.values())
                elif isinstance(value, list):
                    values.extend(value)
    return calls


def _shown(name: str) -> str:
    """A model-supplied name as it may appear in a complaint: short, and encodable (a lone
    surrogate from a ``\\ud83d`` escape would break encoding the repair prompt)."""
    return repair_text(name if len(name) <= 80 else name[:80] + "…")


def _call(index: int, raw: Any, tools: set[str]) -> ToolCall | Complaint:
    where = f"tool_calls[{index}]"
    if not isinstance(raw, dict):
        return Complaint(f"{where} must be an object with a name and arguments")
    function = _function(raw)
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return Complaint(f"{where} has no name")
    if name not in tools:
        listed = ", ".join(sorted(tools)) or "none"
        return Complaint(f'{where} calls unknown tool "{_shown(name)}" (tools: {listed})')
    try:
        arguments = _arguments(function.get("arguments"))
    except ValueError as exc:
        return Complaint(f'{where} ("{name}"): arguments {exc}')
    if not isinstance(arguments, dict):
        return Complaint(f'{where} ("{name}"): arguments must be a JSON object')
    call_id = raw.get("id")
    call_id = call_id if isinstance(call_id, str) and call_id else None
    return ToolCall.model_validate({"id": call_id, "name": name, "arguments": arguments})


def _read(envelope: dict[str, Any], tools: set[str]) -> ModelReply | Complaint:
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


def parse_reply(text: str, tools: set[str], transcript: Sequence[Message] = ()) -> ModelReply | Complaint:
    """Read one CLI reply. ``tools`` are the names the request offered; ``transcript`` is
    the conversation it carried, whose tool results may hold envelopes the reply must not
    run by quoting them."""
    body = text.strip()
    objects = _objects(body)
    quoted: set[tuple[str, str]] | None = None
    for value in _own(body, objects):
        envelope = _unwrap(value)
        if not any(key in envelope for key in _ENVELOPE_KEYS):
            continue
        calls = envelope.get("tool_calls")
        if isinstance(calls, list) and calls:
            quoted = _quoted_calls(transcript) if quoted is None else quoted
            if any(_signature(raw) in quoted for raw in calls):
                continue
        return _read(envelope, tools)
    if '"tool_calls"' in _outside(body, objects):
        return Complaint(
            f'the reply mentions "tool_calls" but holds no valid JSON object (of at most {MAX_DEPTH} levels)'
        )
    return ModelReply(content=body)
