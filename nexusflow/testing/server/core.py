"""The server itself, the same for every provider: one queue of scripted replies, the
recording of every request (API keys redacted), side requests answered off the queue, and
uvicorn on an ephemeral port of 127.0.0.1 in a thread of its own."""

from __future__ import annotations

import itertools
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ...transports.oneshot.style import CliStyles
from ..agents import scripted_environment
from ..errors import scripted_server_not_started
from .anthropic import Anthropic
from .gemini import Gemini
from .openai_chat import OpenAIChat
from .openai_responses import OpenAIResponses
from .provider import Api, Provider
from .replies import ScriptedReply, resolve

_PROVIDERS: dict[Api, Provider] = {p.api: p for p in (Anthropic(), OpenAIChat(), OpenAIResponses(), Gemini())}


@dataclass
class Recorded:
    method: str
    path: str
    api: Api | None
    body: Any
    side: bool
    headers: dict[str, str] = field(default_factory=dict)
    at: float = field(default_factory=time.time)
    """When it arrived (seconds since the epoch, like a log record's ``created``): what
    reached the model before a deadline."""


_SECRET_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
_KEY_QUERY = re.compile(r"(?i)(?:^|(?<=&))((?:api_?)?key=)[^&]*")
_SIDE_HINTS = re.compile(
    r"\b(title|summari[sz]e|summary|topic|suggest(ion)?s?|classif|router|route this|is_new_topic|quota)\b",
    re.IGNORECASE,
)
_SIDE_ASKS = re.compile(
    r"Reply with ONLY the suggestion|\[SUGGESTION MODE|Write the title in|Generate a (short |concise )?title"
    r"|focus only on creating a title",
    re.IGNORECASE,
)


def tool_names(api: Api, body: dict[str, Any]) -> list[str]:
    """The tool names a model turn offers, as the agent spells them."""
    return _PROVIDERS[api].tool_names(body)


def default_is_side(api: Api, body: dict[str, Any]) -> bool:
    """A request the agent makes for itself (a title, a router's verdict, a suggestion for
    the user's next prompt), told apart by its instructions or its closing ask."""
    provider = _PROVIDERS[api]
    if _SIDE_ASKS.search(provider.last_user_text(body)[-3000:]):
        return True
    if provider.is_router(body):
        return True
    if provider.tool_names(body):
        return False
    if re.fullmatch(
        r'\{"role": "user", "content": (\[\{"type": "text", "text": )?"Hi"[^\n]*', provider.last_user_text(body)
    ):
        return True  # a one-word probe of the model (claude-agent-acp, on a model id it does not know)
    return bool(_SIDE_HINTS.search(provider.system_text(body)[:2000]))


class ScriptedModelServer:
    """A model provider on 127.0.0.1 that plays scripted replies; a sync or async context
    manager, ``url`` is the base URL once entered.

    Point a real agent CLI at it (``server.environment(style, home)``) and test your agent
    flows with your own installed CLI without spending a token. It speaks Anthropic Messages,
    OpenAI Chat Completions, OpenAI Responses and Gemini ``generateContent``, each plain and
    streaming (SSE), from one queue of replies. Side requests (titles, routers, token counts,
    model lists) are answered without consuming the queue. Every request is recorded, with
    API keys redacted."""

    def __init__(
        self,
        replies: Iterable[ScriptedReply | str] = (),
        *,
        model: str = "scripted-model",
        is_side: Callable[[Api, dict[str, Any]], bool] = default_is_side,
        side_text: str = "Scripted",
    ) -> None:
        self.model = model
        self.is_side = is_side
        self.side_text = side_text
        self.requests: list[Recorded] = []
        self._queue: list[ScriptedReply] = [ScriptedReply.say(r) if isinstance(r, str) else r for r in replies]
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.port = 0

    # ---- the queue -----------------------------------------------------------------------

    def push(self, *replies: ScriptedReply | str) -> None:
        with self._lock:
            self._queue += [ScriptedReply.say(r) if isinstance(r, str) else r for r in replies]

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def turns(self) -> list[Recorded]:
        """The recorded requests that consumed a scripted reply."""
        return [r for r in self.requests if r.api is not None and not r.side]

    def _next(self) -> ScriptedReply:
        with self._lock:
            if not self._queue:
                return ScriptedReply.fail(500, "scripted model server: no scripted reply left")
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
        config = uvicorn.Config(
            self._app(), log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=1
        )
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
                raise scripted_server_not_started()
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        """A slow reply still being held (the agent gave up on it) is dropped, not waited for."""
        assert self._server is not None and self._thread is not None
        self._server.should_exit = self._server.force_exit = True
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
        provider = _provider_of(request.method, path)
        api = provider.api if provider is not None else None
        headers = {
            key: ("<redacted>" if key.lower() in _SECRET_HEADERS else value) for key, value in request.headers.items()
        }
        query = _KEY_QUERY.sub(r"\1<redacted>", request.url.query)
        shown = f"{path}?{query}" if query else path
        side = api is None or not isinstance(body, dict) or self.is_side(api, body)
        self.requests.append(Recorded(request.method, shown, api, body, side, headers))
        if provider is None:
            return _aside(request.method, path, self.model)
        if not isinstance(body, dict):
            return _error(provider, 400, "scripted model server: the request body is not a JSON object")
        reply = ScriptedReply.say(self.side_text) if side else self._next()
        if reply.delay:
            await anyio.sleep(reply.delay)
        if reply.quota:
            body, quota_headers = provider.quota_answer(reply.error or "usage limit reached", reply.resets_at)
            return JSONResponse(body, status_code=429, headers=quota_headers)
        if reply.status != 200:
            return _error(provider, reply.status, reply.error or "error")
        model = str(body.get("model") or provider.path_model(path) or self.model)
        calls = resolve(reply.tool_calls, provider.tool_names(body))
        if provider.wants_stream(path, body):
            return StreamingResponse(
                provider.stream(reply, calls, model, next(self._ids)), media_type="text/event-stream"
            )
        return JSONResponse(provider.whole(reply, calls, model, next(self._ids)))


def _hung_up(record: logging.LogRecord) -> bool:
    """Agents drop a streamed reply they no longer need (a side request when they exit), and
    a slow reply is cut when the server stops: uvicorn calls either an error, for the scripted
    server neither is one."""
    message = record.getMessage()
    return (
        message != "ASGI callable returned without completing response." and "timeout graceful shutdown" not in message
    )


def _provider_of(method: str, path: str) -> Provider | None:
    if method != "POST":
        return None
    return next((p for p in _PROVIDERS.values() if p.serves(path)), None)


def _error(provider: Provider, status: int, message: str) -> Response:
    return JSONResponse(provider.error_body(status, message), status_code=status)


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
