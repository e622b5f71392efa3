"""OpenAI Responses (``POST .../responses``), as Codex speaks it: typed output items and a
numbered event stream."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from .provider import Api, Provider, error_kind, last_user_message, seconds_until, sse
from .replies import ScriptedCall, ScriptedReply


class OpenAIResponses(Provider):
    api: Api = "responses"

    def serves(self, path: str) -> bool:
        return path.endswith("/responses")

    def system_text(self, body: dict[str, Any]) -> str:
        return str(body.get("instructions") or "")

    def offered(self, tool: dict[str, Any]) -> list[str]:
        if tool.get("type") == "namespace":  # one entry grouping several tools under a name
            return [f"{tool.get('name')}.{t.get('name')}" for t in tool.get("tools", []) if isinstance(t, dict)]
        return [str(tool.get("name", ""))]

    def last_user_text(self, body: dict[str, Any]) -> str:
        return last_user_message(body.get("input"))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": error_kind(status)[0], "code": None, "param": None}}

    def quota_answer(self, message: str, resets_at: float | None) -> tuple[dict[str, Any], dict[str, str]]:
        """A ChatGPT plan's usage limit, as the Codex backend answers it (Codex does not retry it)."""
        error: dict[str, Any] = {"type": "usage_limit_reached", "message": message, "plan_type": "plus"}
        if resets_at is not None:
            error |= {"resets_at": round(resets_at), "resets_in_seconds": seconds_until(resets_at)}
        return {"error": error}, {}

    def _items(self, reply: ScriptedReply, calls: list[ScriptedCall], n: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if reply.text:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for i, call in enumerate(calls):
            namespace, _, name = call.name.rpartition(".")
            item = {
                "type": "function_call",
                "id": f"fc_{n}_{i}",
                "call_id": f"call_{n}_{i}",
                "name": name,
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
            if namespace:
                item["namespace"] = namespace
            items.append(item)
        return items

    def whole(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": self._items(reply, calls, n),
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "total_tokens": 15,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    async def stream(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        whole = self.whole(reply, calls, model, n)
        seq = itertools.count()

        def event(kind: str, **fields: Any) -> str:
            return sse(kind, {"type": kind, "sequence_number": next(seq), **fields})

        yield event("response.created", response=whole | {"status": "in_progress", "output": []})
        for index, item in enumerate(whole["output"]):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                pending = item | {"status": "in_progress", "content": []}
                yield event("response.output_item.added", output_index=index, item=pending)
                part = {"type": "output_text", "text": "", "annotations": []}
                common = {"item_id": item["id"], "output_index": index, "content_index": 0}
                yield event("response.content_part.added", **common, part=part)
                yield event("response.output_text.delta", **common, delta=text)
                yield event("response.output_text.done", **common, text=text)
                yield event("response.content_part.done", **common, part=part | {"text": text})
            else:
                yield event("response.output_item.added", output_index=index, item=item | {"status": "in_progress"})
            yield event("response.output_item.done", output_index=index, item=item)
        yield event("response.completed", response=whole)
