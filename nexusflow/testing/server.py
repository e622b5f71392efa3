"""``ScriptedModelServer``: a model provider on 127.0.0.1 that plays scripted replies.

Point a real agent CLI at it (``server.environment(style, home)``) and test your agent
flows with your own installed CLI without spending a token. It speaks Anthropic Messages,
OpenAI Chat Completions, OpenAI Responses and Gemini ``generateContent``, each plain and
streaming (SSE), from one queue of replies. Side requests (titles, routers, token counts,
model lists) are answered without consuming the queue. Every request is recorded, with
API keys redacted.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import uvicorn
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..transports.cli.style import CliStyles
from .agents import scripted_environment

Api = Literal["anthropic", "chat", "responses", "gemini"]


class ScriptedCall(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Reply(BaseModel):
    """One scripted model reply: text, native tool calls, or an HTTP error."""

    text: str | None = None
    tool_calls: list[ScriptedCall] = Field(default_factory=list)
    status: int = 200
    error: str | None = None
    delay: float = Field(default=0.0, ge=0, description="Seconds to wait before answering (a slow model).")

    @classmethod
    def say(cls, text: str) -> Reply:
        return cls(text=text)

    @classmethod
    def call(cls, name: str, arguments: dict[str, Any] | None = None) -> Reply:
        """One native tool call. ``name`` may be a suffix of the name the agent exposes
        (``add`` matches ``mcp__nexusflow_ab12__add``): the server picks the offered tool."""
        return cls(tool_calls=[ScriptedCall(name=name, arguments=arguments or {})])

    @classmethod
    def fail(cls, status: int, message: str) -> Reply:
        return cls(status=status, error=message)

    @classmethod
    def slow(cls, seconds: float, text: str = "late") -> Reply:
        return cls(text=text, delay=seconds)


@dataclass
class Recorded:
    method: str
    path: str
    api: Api | None
    body: Any
    side: bool
    headers: dict[str, str] = field(default_factory=dict)


_SECRET_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
_KEY_QUERY = re.compile(r"(?i)(?:^|(?<=&))((?:api_?)?key=)[^&]*")
_SIDE_HINTS = re.compile(
    r"\b(title|summari[sz]e|summary|topic|suggest(ion)?s?|classif|router|route this|is_new_topic|quota)\b",
    re.IGNORECASE,
)


def _system_text(api: Api, body: dict[str, Any]) -> str:
    """The instructions of a request (never the user's messages)."""
    if api == "anthropic":
        system = body.get("system")
        if isinstance(system, list):
            return " ".join(block.get("text", "") for block in system if isinstance(block, dict))
        return str(system or "")
    if api == "chat":
        return " ".join(
            str(m.get("content")) for m in body.get("messages", []) if isinstance(m, dict) and m.get("role") == "system"
        )
    if api == "responses":
        return str(body.get("instructions") or "")
    instruction = body.get("systemInstruction") or body.get("system_instruction") or {}
    return " ".join(part.get("text", "") for part in instruction.get("parts", []) if isinstance(part, dict))


def _tool_names(api: Api, body: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for item in body.get("tools") or []:
        if not isinstance(item, dict):
            continue
        if api == "anthropic":
            names.append(str(item.get("name", "")))
        elif api == "chat":
            names.append(str((item.get("function") or {}).get("name", "")))
        elif api == "responses":
            if item.get("type") == "namespace":
                names += [f"{item.get('name')}.{t.get('name')}" for t in item.get("tools", []) if isinstance(t, dict)]
            else:
                names.append(str(item.get("name", "")))
        else:
            declared = item.get("functionDeclarations") or item.get("function_declarations") or []
            names += [str(d.get("name", "")) for d in declared if isinstance(d, dict)]
    return names


_SIDE_ASKS = re.compile(
    r"Reply with ONLY the suggestion|\[SUGGESTION MODE|Write the title in|Generate a (short |concise )?title"
    r"|focus only on creating a title",
    re.IGNORECASE,
)


def _last_user_text(api: Api, body: dict[str, Any]) -> str:
    if api == "gemini":
        contents = [c for c in body.get("contents", []) if isinstance(c, dict) and c.get("role") == "user"]
        return json.dumps(contents[-1]) if contents else ""
    items = body.get("input") if api == "responses" else body.get("messages")
    if isinstance(items, str):
        return items
    users = [m for m in items or [] if isinstance(m, dict) and m.get("role") == "user"]
    return json.dumps(users[-1]) if users else ""


def default_is_side(api: Api, body: dict[str, Any]) -> bool:
    """A request the agent makes for itself (a title, a router's verdict, a suggestion for
    the user's next prompt), told apart by its instructions or its closing ask."""
    if _SIDE_ASKS.search(_last_user_text(api, body)[-3000:]):
        return True
    if api == "gemini" and "complexity_score" in json.dumps(body.get("generationConfig") or {}):
        return True  # gemini's model router, asked when no model is pinned
    if _tool_names(api, body):
        return False
    if re.fullmatch(
        r'\{"role": "user", "content": (\[\{"type": "text", "text": )?"Hi"[^\n]*', _last_user_text(api, body)
    ):
        return True  # a one-word probe of the model (claude-agent-acp, on a model id it does not know)
    return bool(_SIDE_HINTS.search(_system_text(api, body)[:2000]))


class ScriptedModelServer:
    """A sync or async context manager; ``url`` is the base URL once entered."""

    def __init__(
        self,
        replies: Iterable[Reply | str] = (),
        *,
        model: str = "scripted-model",
        is_side: Callable[[Api, dict[str, Any]], bool] = default_is_side,
        side_text: str = "Scripted",
    ) -> None:
        self.model = model
        self.is_side = is_side
        self.side_text = side_text
        self.requests: list[Recorded] = []
        self._queue: list[Reply] = [Reply.say(r) if isinstance(r, str) else r for r in replies]
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.port = 0

    # ---- the queue -----------------------------------------------------------------------

    def push(self, *replies: Reply | str) -> None:
        with self._lock:
            self._queue += [Reply.say(r) if isinstance(r, str) else r for r in replies]

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def turns(self) -> list[Recorded]:
        """The recorded requests that consumed a scripted reply."""
        return [r for r in self.requests if r.api is not None and not r.side]

    def _next(self) -> Reply:
        with self._lock:
            if not self._queue:
                return Reply.fail(500, "scripted model server: no scripted reply left")
            return self._queue.pop(0)

    def environment(self, style: CliStyles, home: Path, *, acp: bool = False) -> dict[str, str]:
        """The environment (and, written under ``home``, the settings files) that point
        ``style``'s CLI at this server; pass it as the client's ``env`` and ``home`` as ``cwd``."""
        return scripted_environment(style, self.url, home, model=self.model, acp=acp)

    # ---- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _prepare(self) -> uvicorn.Server:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        logging.getLogger("uvicorn.error").addFilter(_hung_up)
        return self._server

    def __enter__(self) -> ScriptedModelServer:
        server = self._prepare()
        sockets = [self._socket] if self._socket is not None else None
        self._thread = threading.Thread(target=lambda: anyio.run(server.serve, sockets), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the scripted model server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._close_socket()

    async def __aenter__(self) -> ScriptedModelServer:
        return await anyio.to_thread.run_sync(self.__enter__)

    async def __aexit__(self, *exc_info: Any) -> None:
        await anyio.to_thread.run_sync(self.__exit__, *exc_info)

    def _close_socket(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    # ---- HTTP --------------------------------------------------------------------------

    def _app(self) -> Starlette:
        routes = [
            Route("/{path:path}", self._handle, methods=["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS"]),
        ]
        return Starlette(routes=routes)

    async def _handle(self, request: HttpRequest) -> Response:
        path = request.url.path
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode("utf-8", errors="replace")
        api = _api_of(request.method, path)
        headers = {
            key: ("<redacted>" if key.lower() in _SECRET_HEADERS else value) for key, value in request.headers.items()
        }
        query = _KEY_QUERY.sub(r"\1<redacted>", request.url.query)
        shown = f"{path}?{query}" if query else path
        side = api is None or not isinstance(body, dict) or self.is_side(api, body)
        self.requests.append(Recorded(request.method, shown, api, body, side, headers))
        if api is None:
            return _aside(request.method, path, self.model)
        if not isinstance(body, dict):
            return _error(api, 400, "scripted model server: the request body is not a JSON object")
        if side:
            reply = Reply.say(self.side_text)
        else:
            reply = self._next()
        if reply.delay:
            await anyio.sleep(reply.delay)
        if reply.status != 200:
            return _error(api, reply.status, reply.error or "error")
        stream = _wants_stream(api, path, body)
        model = str(body.get("model") or _gemini_model(path) or self.model)
        calls = _resolve(reply.tool_calls, _tool_names(api, body))
        render = _RENDER[api]
        if stream:
            return StreamingResponse(
                render.stream(reply, calls, model, next(self._ids)), media_type="text/event-stream"
            )
        return JSONResponse(render.whole(reply, calls, model, next(self._ids)))


def _hung_up(record: logging.LogRecord) -> bool:
    """Agents drop a streamed reply they no longer need (a side request when they exit):
    uvicorn calls that an error, for the scripted server it is not one."""
    return record.getMessage() != "ASGI callable returned without completing response."


def _api_of(method: str, path: str) -> Api | None:
    if method != "POST":
        return None
    if path.endswith("/messages") and "count_tokens" not in path:
        return "anthropic"
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if ":generateContent" in path or ":streamGenerateContent" in path:
        return "gemini"
    return None


def _gemini_model(path: str) -> str | None:
    match = re.search(r"/models/([^/:]+):", path)
    return match.group(1) if match else None


def _wants_stream(api: Api, path: str, body: dict[str, Any]) -> bool:
    if api == "gemini":
        return ":streamGenerateContent" in path
    return bool(body.get("stream"))


def _resolve(calls: list[ScriptedCall], offered: list[str]) -> list[ScriptedCall]:
    """Match each scripted name to the tool the agent offers under its own naming."""
    resolved = []
    for call in calls:
        exact = [name for name in offered if name == call.name]
        suffixed = [name for name in offered if re.search(rf"(^|[_.\-]){re.escape(call.name)}$", name)]
        chosen = (exact or suffixed or [call.name])[0]
        resolved.append(call.model_copy(update={"name": chosen}))
    return resolved


def _aside(method: str, path: str, model: str) -> Response:
    """Requests that are not model turns: HEAD probes, model lists, token counts."""
    if path.endswith("count_tokens") or path.endswith(":countTokens"):
        return JSONResponse({"input_tokens": 1, "totalTokens": 1})
    if path.rstrip("/").endswith("/models"):
        entry = {
            "id": model,
            "object": "model",
            "created": 0,
            "owned_by": "nexusflow",
            "type": "model",
            "display_name": model,
            "name": f"models/{model}",
        }
        return JSONResponse({"object": "list", "data": [entry], "models": [entry], "has_more": False})
    if method in ("HEAD", "GET"):
        return Response(status_code=200)
    return JSONResponse({"error": {"message": f"the scripted model server does not serve {method} {path}"}}, 404)


_ERROR_TYPES = {  # status -> (Anthropic and OpenAI type, Gemini status), as the providers name them
    401: ("authentication_error", "UNAUTHENTICATED"),
    403: ("permission_error", "PERMISSION_DENIED"),
    404: ("not_found_error", "NOT_FOUND"),
    429: ("rate_limit_error", "RESOURCE_EXHAUSTED"),
    503: ("overloaded_error", "UNAVAILABLE"),
}


def _error(api: Api, status: int, message: str) -> Response:
    default = ("api_error", "INTERNAL") if status >= 500 else ("invalid_request_error", "INVALID_ARGUMENT")
    kind, gemini_status = _ERROR_TYPES.get(status, default)
    if api == "anthropic":
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    elif api == "gemini":
        body = {"error": {"code": status, "message": message, "status": gemini_status}}
    else:
        body = {"error": {"message": message, "type": kind, "code": None, "param": None}}
    return JSONResponse(body, status_code=status)


def _sse(event: str | None, data: Any) -> str:
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {json.dumps(data)}\n\n"


class _Render:
    def whole(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
        raise NotImplementedError

    async def stream(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        raise NotImplementedError
        yield ""


class _Anthropic(_Render):
    def _blocks(self, reply: Reply, calls: list[ScriptedCall], n: int) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        blocks += [
            {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": c.name, "input": c.arguments}
            for i, c in enumerate(calls)
        ]
        return blocks

    def whole(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
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

    async def stream(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        message = self.whole(reply, calls, model, n) | {"content": [], "stop_reason": None}
        yield _sse("message_start", {"type": "message_start", "message": message})
        for index, block in enumerate(self._blocks(reply, calls, n)):
            start: dict[str, Any]
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            yield _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        stop = {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None}
        yield _sse("message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 5}})
        yield _sse("message_stop", {"type": "message_stop"})


class _Chat(_Render):
    def _calls(self, calls: list[ScriptedCall], n: int) -> list[dict[str, Any]]:
        return [
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for i, c in enumerate(calls)
        ]

    def whole(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if calls:
            message["tool_calls"] = self._calls(calls, n)
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    async def stream(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
        yield _sse(
            None,
            base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        )
        if reply.text:
            yield _sse(
                None, base | {"choices": [{"index": 0, "delta": {"content": reply.text}, "finish_reason": None}]}
            )
        for i, call in enumerate(self._calls(calls, n)):
            yield _sse(
                None,
                base
                | {"choices": [{"index": 0, "delta": {"tool_calls": [call | {"index": i}]}, "finish_reason": None}]},
            )
        finish = "tool_calls" if calls else "stop"
        yield _sse(None, base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        yield _sse(
            None, base | {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
        )
        yield "data: [DONE]\n\n"


class _Responses(_Render):
    def _items(self, reply: Reply, calls: list[ScriptedCall], n: int) -> list[dict[str, Any]]:
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

    def whole(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
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

    async def stream(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        whole = self.whole(reply, calls, model, n)
        seq = itertools.count()
        yield _sse(
            "response.created",
            {
                "type": "response.created",
                "sequence_number": next(seq),
                "response": whole | {"status": "in_progress", "output": []},
            },
        )
        for index, item in enumerate(whole["output"]):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                pending = item | {"status": "in_progress", "content": []}
                yield _sse(
                    "response.output_item.added",
                    {
                        "type": "response.output_item.added",
                        "sequence_number": next(seq),
                        "output_index": index,
                        "item": pending,
                    },
                )
                part = {"type": "output_text", "text": "", "annotations": []}
                common = {"item_id": item["id"], "output_index": index, "content_index": 0}
                yield _sse(
                    "response.content_part.added",
                    {"type": "response.content_part.added", "sequence_number": next(seq), **common, "part": part},
                )
                yield _sse(
                    "response.output_text.delta",
                    {"type": "response.output_text.delta", "sequence_number": next(seq), **common, "delta": text},
                )
                yield _sse(
                    "response.output_text.done",
                    {"type": "response.output_text.done", "sequence_number": next(seq), **common, "text": text},
                )
                yield _sse(
                    "response.content_part.done",
                    {
                        "type": "response.content_part.done",
                        "sequence_number": next(seq),
                        **common,
                        "part": part | {"text": text},
                    },
                )
            else:
                yield _sse(
                    "response.output_item.added",
                    {
                        "type": "response.output_item.added",
                        "sequence_number": next(seq),
                        "output_index": index,
                        "item": item | {"status": "in_progress"},
                    },
                )
            yield _sse(
                "response.output_item.done",
                {
                    "type": "response.output_item.done",
                    "sequence_number": next(seq),
                    "output_index": index,
                    "item": item,
                },
            )
        yield _sse(
            "response.completed", {"type": "response.completed", "sequence_number": next(seq), "response": whole}
        )


class _Gemini(_Render):
    def whole(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
        parts += [{"functionCall": {"name": c.name, "args": c.arguments}} for c in calls]
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
            "modelVersion": model,
        }

    async def stream(self, reply: Reply, calls: list[ScriptedCall], model: str, n: int) -> AsyncIterator[str]:
        yield _sse(None, self.whole(reply, calls, model, n))


_RENDER: dict[Api, _Render] = {
    "anthropic": _Anthropic(),
    "chat": _Chat(),
    "responses": _Responses(),
    "gemini": _Gemini(),
}
