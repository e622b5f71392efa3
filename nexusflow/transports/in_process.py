"""A Python callable as the model: the seam every other transport reproduces."""

from __future__ import annotations

import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from pydantic import ValidationError

from ..errors import AuthRequired, ModelError, QuotaExhausted
from ..messages import ModelReply, ModelRequest
from .base import Log, TransportFactory, TurnScope
from .errors import model_generate_raised, model_reply_invalid, model_reply_unusable

Generate = Callable[[ModelRequest], ModelReply | dict[str, Any] | str | Awaitable[ModelReply | dict[str, Any] | str]]


def coerce_reply(value: Any) -> ModelReply:
    """Accept a ``ModelReply``, the plain dicts ``{"content": ...}`` /
    ``{"tool_calls": [...]}``, or a string (the final answer)."""
    if isinstance(value, ModelReply):
        return value
    if isinstance(value, str):
        return ModelReply(content=value)
    if isinstance(value, dict):
        try:
            return ModelReply.model_validate(value)
        except ValidationError as exc:
            raise model_reply_invalid(exc) from exc
    raise model_reply_unusable(value)


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status an HTTP client's error carries, found by shape so that no HTTP library
    is imported: ``.status_code`` (the openai and anthropic SDKs) or ``.response.status_code``
    (httpx's ``HTTPStatusError``, requests' ``HTTPError``)."""
    for holder in (exc, getattr(exc, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


_UNREACHED = (
    ("httpx", ("ConnectError", "ConnectTimeout")),
    ("requests.exceptions", ("ConnectionError",)),
    ("openai", ("APIConnectionError",)),
    ("anthropic", ("APIConnectionError",)),
)
"""Where the connection errors of the usual HTTP clients live: httpx's ``ConnectError`` and
``ConnectTimeout``, requests' ``ConnectionError``, the openai and anthropic SDKs'
``APIConnectionError`` (which those SDKs retry themselves)."""


def _unreached() -> tuple[type[BaseException], ...]:
    """The connection errors of those clients that this process imported: an error a client
    raised comes from a process that imported it, so none is imported here, and an error is
    known by its class (a subclass as its base), never by its name."""
    found: list[type[BaseException]] = [ConnectionError]
    for module, names in _UNREACHED:
        loaded = sys.modules.get(module)
        for name in names:
            cls = getattr(loaded, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append(cls)
    return tuple(found)


def _is_transient(exc: BaseException) -> bool:
    """A rate limit (429), a server error (5xx), or a model server that could not be reached
    (it is restarting, or its connection was refused): try again."""
    status = _http_status(exc)
    if status is not None:
        return status == 429 or 500 <= status <= 599
    return isinstance(exc, _unreached())


class InProcessTransport:
    def __init__(self, generate: Generate) -> None:
        self._generate = generate
        self._is_async = inspect.iscoroutinefunction(generate) or inspect.iscoroutinefunction(type(generate).__call__)

    async def generate(self, request: ModelRequest, scope: TurnScope | None = None) -> ModelReply:
        try:
            if self._is_async:
                value = await self._generate(request)  # type: ignore[misc]
            else:
                value = await anyio.to_thread.run_sync(self._generate, request)
                if inspect.isawaitable(value):
                    value = await value
        except (
            ModelError,
            QuotaExhausted,
            AuthRequired,
        ):  # a model of your own may say its quota is spent, or its login
            raise
        except Exception as exc:
            raise model_generate_raised(exc, transient=_is_transient(exc)) from exc
        return coerce_reply(value)


def in_process_transport(generate: Generate) -> TransportFactory:
    @asynccontextmanager
    async def open_transport(log: Log | None = None) -> AsyncIterator[InProcessTransport]:
        yield InProcessTransport(generate)

    return open_transport
