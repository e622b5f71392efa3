"""Deterministic models for tests, demos and your own test suites: no subscription, no
network, the same answer every time."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..config._checks import sequence
from ..messages import AssistantMessage, ModelReply, ModelRequest, ToolMessage, UserMessage
from ..transports import coerce_reply
from .errors import scripted_call_not_json, scripted_model_has_no_reply

ReplyLike = ModelReply | dict[str, Any] | str
ScriptStep = ReplyLike | Callable[[ModelRequest], ReplyLike]


class ScriptedModel:
    """Plays one scripted reply per model turn, keyed by the turn, and records every request.

    Reply ``n`` answers the run's turn ``n`` (counted from the assistant messages the request
    holds, a conversation's earlier exchanges included), so a run resumed in a new process,
    whose finished turns replay without asking the model, gets the replies of the turns it
    has not played yet. A step is a reply (``ModelReply``, ``{"content": ...}``,
    ``{"tool_calls": [...]}`` or a string) or a callable from the request to a reply, for
    answers that depend on tool results. Use it as
    ``create_in_process_client(generate=ScriptedModel([...]))``.
    """

    def __init__(self, replies: Iterable[ScriptStep]) -> None:
        self._steps = sequence("ScriptedModel", "replies", replies)
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []

    def __getstate__(self) -> dict[str, Any]:
        """Picklable, for a run on another process (a Dask worker): it takes a copy, whose
        requests are recorded there."""
        return {"_steps": self._steps, "requests": self.requests}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        return len(self.requests)

    def __call__(self, request: ModelRequest) -> ModelReply:
        index = sum(isinstance(message, AssistantMessage) for message in request.messages)
        with self._lock:
            self.requests.append(request)
        if index >= len(self._steps):
            raise scripted_model_has_no_reply(index, len(self._steps))
        step = self._steps[index]
        return coerce_reply(step(request) if callable(step) else step)


_DIRECTIVE = re.compile(r"^\s*call\s+([A-Za-z0-9_.-]+)\s*(\{.*\})?\s*$")


def _planned_turns(prompt: str) -> list[list[dict[str, Any]]]:
    turns: list[list[dict[str, Any]]] = []
    for paragraph in re.split(r"\n\s*\n", prompt):
        calls = []
        for line in paragraph.splitlines():
            match = _DIRECTIVE.match(line)
            if match:
                arguments = json.loads(match.group(2)) if match.group(2) else {}
                calls.append({"name": match.group(1), "arguments": arguments})
        if calls:
            turns.append(calls)
    return turns


def follow_prompt(request: ModelRequest) -> ModelReply:
    """A scripted agent driven by the prompt itself, so any toolkit can be exercised with
    no model at all. Each paragraph of ``call NAME {json arguments}`` lines is one turn
    (its calls run in parallel); then it answers with every tool result, one per line.
    A prompt without such lines is echoed back."""
    prompt = next((m.content for m in request.messages if isinstance(m, UserMessage)), "")
    turn = sum(isinstance(m, AssistantMessage) for m in request.messages)
    try:
        planned = _planned_turns(prompt)
    except json.JSONDecodeError as exc:
        raise scripted_call_not_json(exc) from exc
    if turn < len(planned):
        calls = [dict(call, id=f"call_{turn}_{index}") for index, call in enumerate(planned[turn])]
        return ModelReply.model_validate({"tool_calls": calls})
    names = {
        call.id: call.name
        for message in request.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls or []
    }
    results = [
        f"{names.get(m.tool_call_id, 'tool')}: {m.content}" for m in request.messages if isinstance(m, ToolMessage)
    ]
    return ModelReply(content="\n".join(results) if results else prompt)
