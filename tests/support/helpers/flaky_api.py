"""A reverse proxy in front of the test session's Prefect API that answers 503 to the first
``failures`` requests of one route (by default: create a flow run), or to all of them until
``until`` is set: the server's own answer under SQLite load."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@contextmanager
def flaky_api(
    upstream: str,
    failures: int,
    route: str = "POST /api/flow_runs",
    until: threading.Event | None = None,
    relayed: list[str] | None = None,
) -> Iterator[tuple[str, list[str]]]:
    """``route`` is a regular expression for ``METHOD /path`` that the whole request must match.
    ``relayed`` gets ``METHOD /path`` of each 503 the upstream server answered itself (a busy
    SQLite's), which the proxy passes on as it is."""
    refused: list[str] = []
    client = httpx.AsyncClient(base_url=upstream.removesuffix("/api"), timeout=60)

    async def forward(request: Request) -> Response:
        refusing = len(refused) < failures and not (until is not None and until.is_set())
        if refusing and re.fullmatch(route, f"{request.method} {request.url.path.rstrip('/')}"):
            refused.append(request.url.path)
            return Response('{"detail": "database is locked"}', status_code=503)
        upstream_response = await client.request(
            request.method,
            request.url.path,
            params=request.query_params,
            content=await request.body(),
            headers={k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")},
        )
        headers = {
            k: v
            for k, v in upstream_response.headers.items()
            if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")
        }
        if relayed is not None and upstream_response.status_code == 503:
            relayed.append(f"{request.method} {request.url.path}")
        return Response(upstream_response.content, status_code=upstream_response.status_code, headers=headers)

    app = Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.05)
    try:
        yield f"http://127.0.0.1:{port}/api", refused
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
