"""An HTTP server on a port any local process can reach, bounded before a request has shown
its bearer token: connections that never authorise are closed after a while and past a
number, oldest first, never the newcomer; the token is compared in constant time. Used by
the toolkit served to an ACP agent and by ``nexusflow mcp --http``."""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass, field
from typing import Any

QUEUE = 4096
"""Connections the kernel holds for us to accept (capped by ``net.core.somaxconn``)."""


@dataclass
class _Unauthorised:
    peer: Any
    deadline: asyncio.TimerHandle
    spoke: bool = False


@dataclass
class Guard:
    """The connections on which no request has carried the token yet, oldest first. Each is
    closed ``idle_timeout`` seconds after it opened; past ``limit`` of them, the oldest other
    one that has sent nothing is closed (else the oldest), never the newcomer: the agent's
    own new connection speaks at once, so a flood of idle ones cannot keep it out, and the
    descriptors a flood takes stay bounded whatever the process's limit."""

    limit: int
    idle_timeout: float
    open: dict[asyncio.BaseTransport, _Unauthorised] = field(default_factory=dict)

    def opened(self, transport: asyncio.BaseTransport) -> None:
        deadline = asyncio.get_running_loop().call_later(self.idle_timeout, self._close, transport)
        self.open[transport] = _Unauthorised(transport.get_extra_info("peername"), deadline)
        if len(self.open) > self.limit:
            silent = next((t for t, c in self.open.items() if not c.spoke and t is not transport), None)
            self._close(next(iter(self.open)) if silent is None else silent)

    def heard(self, transport: asyncio.BaseTransport) -> None:
        if transport in self.open:
            self.open[transport].spoke = True

    def authorised(self, peer: Any) -> None:
        """``peer``: the ASGI scope's client, the one link from a request to its connection."""
        found = next((t for t, c in self.open.items() if c.peer == peer), None)
        if found is not None:
            self.open.pop(found).deadline.cancel()

    def closed(self, transport: asyncio.BaseTransport) -> None:
        found = self.open.pop(transport, None)
        if found is not None:
            found.deadline.cancel()

    def _close(self, transport: asyncio.BaseTransport) -> None:
        self.closed(transport)
        transport.close()


def guarded_protocol(guard: Guard) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol (pinned, so every machine serves alike) reporting to ``guard``."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Guarded(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            guard.opened(transport)

        def data_received(self, data: bytes) -> None:
            guard.heard(self.transport)
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            guard.closed(self.transport)
            super().connection_lost(exc)

    return Guarded


def require_token(app: Any, token: str, guard: Guard) -> Any:
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if not hmac.compare_digest(dict(scope["headers"]).get(b"authorization", b""), expected):
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                )
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
            guard.authorised(scope.get("client"))
        await app(scope, receive, send)

    return guarded


def guarded_server(app: Any, guard: Guard, shutdown_timeout: int) -> Any:
    """uvicorn serving ``app`` through the guarded protocol (a ``uvicorn.Server``). Its
    backlog is also how many connections asyncio accepts in one go, each a descriptor before
    the guard sees it: bounded like them. Deepen the kernel's queue (``QUEUE``) once it
    listens: waiting connections cost nothing, and a flood would stall there."""
    import uvicorn

    config = uvicorn.Config(
        app,
        http=guarded_protocol(guard),
        ws="none",
        log_level="warning",
        lifespan="on",
        access_log=False,
        backlog=guard.limit,
        timeout_graceful_shutdown=shutdown_timeout,
    )
    return uvicorn.Server(config)
