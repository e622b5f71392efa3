"""Gemini ``generateContent`` and ``streamGenerateContent`` (the model in the URL), as Gemini
CLI speaks it."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from .provider import Api, Provider, error_kind, seconds_until, sse
from .replies import ScriptedCall, ScriptedReply


class Gemini(Provider):
    api: Api = "gemini"

    def serves(self, path: str) -> bool:
        return ":generateContent" in path or ":streamGenerateContent" in path

    def system_text(self, body: dict[str, Any]) -> str:
        instruction = body.get("systemInstruction") or body.get("system_instruction") or {}
        return " ".join(part.get("text", "") for part in instruction.get("parts", []) if isinstance(part, dict))

    def offered(self, tool: dict[str, Any]) -> list[str]:
        declared = tool.get("functionDeclarations") or tool.get("function_declarations") or []
        return [str(d.get("name", "")) for d in declared if isinstance(d, dict)]

    def last_user_text(self, body: dict[str, Any]) -> str:
        contents = [c for c in body.get("contents", []) if isinstance(c, dict) and c.get("role") == "user"]
        return json.dumps(contents[-1]) if contents else ""

    def is_router(self, body: dict[str, Any]) -> bool:
        return "complexity_score" in json.dumps(body.get("generationConfig") or {})  # asked when no model is pinned

    def wants_stream(self, path: str, body: dict[str, Any]) -> bool:
        return ":streamGenerateContent" in path

    def path_model(self, path: str) -> str | None:
        match = re.search(r"/models/([^/:]+):", path)
        return match.group(1) if match else None

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"code": status, "message": message, "status": error_kind(status)[1]}}

    def quota_answer(self, message: str, resets_at: float | None) -> tuple[dict[str, Any], dict[str, str]]:
        """A per-day quota spent, which Gemini CLI takes as terminal (a per-minute one it retries)."""
        details: list[dict[str, Any]] = [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
                        "quotaId": "GenerateRequestsPerDayPerProjectPerModel",
                    }
                ],
            }
        ]
        if resets_at is not None:
            details.append(
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{seconds_until(resets_at)}s"}
            )
        error = {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED", "details": details}
        return {"error": error}, {}

    def whole(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
        parts += [{"functionCall": {"name": c.name, "args": c.arguments}} for c in calls]
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
            "modelVersion": model,
        }

    async def stream(self, reply: ScriptedReply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        yield sse(None, self.whole(reply, calls, model, n))
