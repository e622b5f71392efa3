"""OpenAI Chat Completions (``POST .../chat/completions``), as Copilot CLI, opencode and goose
speak it."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from .provider import Api, Provider, error_kind, last_user_message, seconds_until, sse
from .replies import ScriptedCall, ScriptedReply

_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


class OpenAIChat(Provider):
    api: Api = "chat"

    def serves(self, path: str) -> bool:
        return path.endswith("/chat/completions")

    def system_text(self, body: dict[str, Any]) -> str:
        return " ".join(
            str(m.get("content")) for m in body.get("messages", []) if isinstance(m, dict) and m.get("role") == "system"
        )

    def offered(self, tool: dict[str, Any]) -> list[str]:
        return [str((tool.get("function") or {}).get("name", ""))]

    def last_user_text(self, body: dict[str, Any]) -> str:
        return last_user_message(body.get("messages"))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": error_kind(status)[0], "code": None, "param": None}}

    def quota_answer(self, message: str, resets_at: float | None) -> tuple[dict[str, Any], dict[str, str]]:
        error = {"message": message, "type": "insufficient_quota", "code": "insufficient_quota", "param": None}
        headers = {} if resets_at is None else {"retry-after": str(seconds_until(resets_at))}
        return {"error": error}, headers

    def _calls(self, calls: list[ScriptedCall], n: int) -> list[dict[str, Any]]:
        return [
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for i, c in enumerate(calls)
        ]

    def whole(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if calls:
            message["tool_calls"] = self._calls(calls, n)
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _USAGE,
        }

    async def stream(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            return sse(None, base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        yield chunk({"role": "assistant", "content": ""})
        if reply.text:
            yield chunk({"content": reply.text})
        for i, call in enumerate(self._calls(calls, n)):
            yield chunk({"tool_calls": [call | {"index": i}]})
        yield chunk({}, "tool_calls" if calls else "stop")
        yield sse(None, base | {"choices": [], "usage": _USAGE})
        yield "data: [DONE]\n\n"
