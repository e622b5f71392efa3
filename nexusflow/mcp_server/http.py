"""``nexusflow mcp --http``: streamable HTTP, safe by default. Loopback unless told otherwise,
a bearer token on every request, ``Host`` and ``Origin`` checked against DNS rebinding, a
request body capped, and connections without the token bounded (``_support.http_guard``)."""

from __future__ import annotations

import ipaddress
import socket
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from .._support.http_guard import QUEUE, Guard, guarded_server, require_token
from .._support.secrets import register
from ..config.settings import settings

MAX_BODY = 1024 * 1024
"""Bytes of one request's body (a 413 past it): a prompt of the server's own agent is
bounded lower still (``runs.PROMPT_BOUND``)."""
PATH = "/mcp"


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def security(host: str, port: int, origins: list[str]) -> TransportSecuritySettings:
    """The ``Host`` values a client of this address sends, and the ``Origin`` values of pages
    it serves itself plus those allowed by name: a page elsewhere that a browser was tricked
    into sending here (DNS rebinding) is refused before any tool runs."""
    names = {host, "127.0.0.1", "localhost"} if loopback(host) else {host}
    hosts = [f"{name}:{port}" for name in sorted(names)]
    if loopback(host):
        hosts.append(f"[::1]:{port}")
    allowed = [f"http://{name}" for name in hosts] + list(origins)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=allowed)


async def serve_http(server: MCPServer, host: str, port: int, token: str, origins: list[str], *, say: bool) -> None:
    """Serve until Ctrl-C or SIGTERM (uvicorn stops, then raises the signal again for the
    command to end as it does). ``say``: print the token, which was made here."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    limits = settings()
    guard = Guard(limits.served_max_unauthorised, limits.served_idle_timeout)
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        json_response=True,
        max_request_body_size=MAX_BODY,
        transport_security=security(host, port, origins),
        host=host,
    )
    web = guarded_server(require_token(app, token, guard), guard, limits.served_shutdown_timeout)
    shown = f"[{host}]" if ":" in host else host
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(web.serve, [sock])
            while not web.started:
                await anyio.sleep(0.01)
            sock.listen(QUEUE)
            told = f"; bearer token: {token}" if say else " (the bearer token given)"
            print(f"nexusflow: MCP server on http://{shown}:{port}{PATH}{told}", file=sys.stderr, flush=True)
            register(token)  # said once, on purpose; masked in every log line after
    finally:
        sock.close()
