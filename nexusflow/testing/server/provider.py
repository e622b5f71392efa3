"""What the server core needs to know about one provider's API: which requests are its model
turns, how to read them, and how to answer them. One subclass per API, so that a provider's
quirks live in one module."""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any, Literal

from .replies import ScriptedCall, ScriptedReply

Api = Literal["anthropic", "chat", "responses", "gemini"]

_ERROR_TYPES = {  # status -> (Anthropic and OpenAI type, Gemini status), as the providers name them
    401: ("authentication_error", "UNAUTHENTICATED"),
    403: ("permission_error", "PERMISSION_DENIED"),
    404: ("not_found_error", "NOT_FOUND"),
    429: ("rate_limit_error", "RESOURCE_EXHAUSTED"),
    503: ("overloaded_error", "UNAVAILABLE"),
}


def error_kind(status: int) -> tuple[str, str]:
    """(Anthropic and OpenAI error type, Gemini status) for an HTTP status."""
    default = ("api_error", "INTERNAL") if status >= 500 else ("invalid_request_error", "INVALID_ARGUMENT")
    return _ERROR_TYPES.get(status, default)


def seconds_until(resets_at: float) -> int:
    return max(0, round(resets_at - time.time()))


def sse(event: str | None, data: Any) -> str:
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {json.dumps(data)}\n\n"


def last_user_message(items: Any) -> str:
    """The last user message of a message list (or the bare string some agents send)."""
    if isinstance(items, str):
        return items
    users = [m for m in items or [] if isinstance(m, dict) and m.get("role") == "user"]
    return json.dumps(users[-1]) if users else ""


class Provider(ABC):
    api: Api

    @abstractmethod
    def serves(self, path: str) -> bool:
        """Whether a POST to ``path`` is a model turn in this API."""

    @abstractmethod
    def system_text(self, body: dict[str, Any]) -> str:
        """The instructions of a request (never the user's messages)."""

    @abstractmethod
    def offered(self, tool: dict[str, Any]) -> list[str]:
        """The names one entry of the request's ``tools`` declares."""

    @abstractmethod
    def last_user_text(self, body: dict[str, Any]) -> str: ...

    @abstractmethod
    def error_body(self, status: int, message: str) -> dict[str, Any]: ...

    @abstractmethod
    def quota_answer(self, message: str, resets_at: float | None) -> tuple[dict[str, Any], dict[str, str]]:
        """The body and headers of this provider's 429 for a spent quota window."""

    @abstractmethod
    def whole(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
        """The plain (non-streaming) answer; ``n`` numbers the ids it mints."""

    @abstractmethod
    def stream(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        """The same answer as server-sent events."""

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        return [name for tool in body.get("tools") or [] if isinstance(tool, dict) for name in self.offered(tool)]

    def wants_stream(self, path: str, body: dict[str, Any]) -> bool:
        return bool(body.get("stream"))

    def path_model(self, path: str) -> str | None:
        """The model named in the URL, for APIs that put it there."""
        return None

    def is_router(self, body: dict[str, Any]) -> bool:
        """A request the agent's own model router makes (always a side request)."""
        return False
