"""What a test scripts: the replies the server plays, in every provider's shape alike."""

from __future__ import annotations

import re
import time
from typing import Any

from pydantic import BaseModel, Field


class ScriptedCall(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptedReply(BaseModel):
    """One scripted model reply: text, native tool calls, or an HTTP error.

    Named apart from ``nexusflow.ModelReply`` (what a model turn returns to the loop): this
    is what the server sends over HTTP, in whichever provider's shape the agent asked for."""

    text: str | None = None
    tool_calls: list[ScriptedCall] = Field(default_factory=list)
    status: int = 200
    error: str | None = None
    delay: float = Field(default=0.0, ge=0, description="Seconds to wait before answering (a slow model).")
    quota: bool = Field(default=False, description="The 429 says the subscription's window is spent.")
    resets_at: float | None = Field(default=None, description="When that window resets (Unix seconds), if said.")

    @classmethod
    def say(cls, text: str) -> ScriptedReply:
        return cls(text=text)

    @classmethod
    def call(cls, name: str, arguments: dict[str, Any] | None = None) -> ScriptedReply:
        """One native tool call. ``name`` may be a suffix of the name the agent exposes
        (``add`` matches ``mcp__nexusflow_ab12__add``): the server picks the offered tool."""
        return cls(tool_calls=[ScriptedCall(name=name, arguments=arguments or {})])

    @classmethod
    def fail(cls, status: int, message: str) -> ScriptedReply:
        return cls(status=status, error=message)

    @classmethod
    def quota_reached(cls, resets_in: float | None = None, message: str = "usage limit reached") -> ScriptedReply:
        """The provider's own answer to a spent subscription window: a 429 in its shape, with
        the headers and fields its CLIs read the reset time from, and that tell them not to
        retry (a real window lasts hours: a CLI that retried would only burn the test's time)."""
        resets_at = None if resets_in is None else time.time() + resets_in
        return cls(status=429, error=message, quota=True, resets_at=resets_at)

    @classmethod
    def slow(cls, seconds: float, text: str = "late") -> ScriptedReply:
        return cls(text=text, delay=seconds)


def resolve(calls: list[ScriptedCall], offered: list[str]) -> list[ScriptedCall]:
    """Match each scripted name to the tool the agent offers under its own naming."""
    resolved = []
    for call in calls:
        exact = [name for name in offered if name == call.name]
        suffixed = [name for name in offered if re.search(rf"(^|[_.\-]){re.escape(call.name)}$", name)]
        chosen = (exact or suffixed or [call.name])[0]
        resolved.append(call.model_copy(update={"name": chosen}))
    return resolved
