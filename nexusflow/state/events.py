"""What ``Client.stream`` yields while a run goes on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from ..messages import RunResult, ToolCall, ToolResult


class TextChunk(BaseModel):
    """Answer text. A one-shot CLI gives a turn's whole text as one chunk: it is known
    only once the reply has been parsed, and nexusflow does not fake deltas."""

    kind: Literal["text"] = "text"
    step: int
    text: str


class ThoughtChunk(BaseModel):
    """The agent's reasoning as it streams (ACP agents that share it)."""

    kind: Literal["thought"] = "thought"
    step: int
    text: str


class ToolCallStarted(BaseModel):
    kind: Literal["tool_call"] = "tool_call"
    step: int
    call: ToolCall


class ToolCallFinished(BaseModel):
    kind: Literal["tool_result"] = "tool_result"
    step: int
    call: ToolCall
    result: ToolResult


class RunFinished(BaseModel):
    kind: Literal["done"] = "done"
    result: RunResult


StreamEvent = Annotated[
    TextChunk | ThoughtChunk | ToolCallStarted | ToolCallFinished | RunFinished, Field(discriminator="kind")
]

Emit = Callable[[StreamEvent], None]
