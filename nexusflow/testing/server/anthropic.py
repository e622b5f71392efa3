"""Anthropic Messages (``POST .../messages``), as Claude Code and claude-agent-acp speak it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from .provider import Api, Provider, error_kind, last_user_message, seconds_until, sse
from .replies import ScriptedCall, ScriptedReply


class Anthropic(Provider):
    api: Api = "anthropic"

    def serves(self, path: str) -> bool:
        return path.endswith("/messages") and "count_tokens" not in path

    def system_text(self, body: dict[str, Any]) -> str:
        system = body.get("system")
        if isinstance(system, list):
            return " ".join(block.get("text", "") for block in system if isinstance(block, dict))
        return str(system or "")

    def offered(self, tool: dict[str, Any]) -> list[str]:
        return [str(tool.get("name", ""))]

    def last_user_text(self, body: dict[str, Any]) -> str:
        return last_user_message(body.get("messages"))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": error_kind(status)[0], "message": message}}

    def quota_answer(self, message: str, resets_at: float | None) -> tuple[dict[str, Any], dict[str, str]]:
        """A subscription's unified limit rejected, as Claude Code reads it (``x-should-retry``
        stops its ten retries)."""
        headers = {
            "x-should-retry": "false",
            "anthropic-ratelimit-unified-status": "rejected",
            "anthropic-ratelimit-unified-representative-claim": "five_hour",
        }
        if resets_at is not None:
            headers["anthropic-ratelimit-unified-reset"] = str(round(resets_at))
            headers["retry-after"] = str(seconds_until(resets_at))
        return self.error_body(429, message), headers

    def _blocks(self, reply: ScriptedReply, calls: list[ScriptedCall], n: int) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        blocks += [
            {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": c.name, "input": c.arguments}
            for i, c in enumerate(calls)
        ]
        return blocks

    def whole(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
        return {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": self._blocks(reply, calls, n),
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    async def stream(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        message = self.whole(reply, calls, model, n) | {"content": [], "stop_reason": None}
        yield sse("message_start", {"type": "message_start", "message": message})
        for index, block in enumerate(self._blocks(reply, calls, n)):
            start: dict[str, Any]
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            yield sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
            yield sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            yield sse("content_block_stop", {"type": "content_block_stop", "index": index})
        stop = {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None}
        yield sse("message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 5}})
        yield sse("message_stop", {"type": "message_stop"})
