"""The run's toolkit served to an ACP agent as an MCP server: streamable HTTP on 127.0.0.1,
an ephemeral port, a per-session bearer token and a per-session random name.

The random name is what lets a permission request be matched safely: only a call that
names this server (and one of its tools) can be ours. The token is registered for
redaction as it is minted: an agent may print it, and it is compared in constant time.

Any local process can connect to the port, so connections are bounded before the token is
seen (``_Guard``) and at shutdown (``NEXUSFLOW_SERVED_*``, docs/guarantees.md): a flood of
idle connections must not take the run's file descriptors, nor a request whose body never
ends hold the run's exit.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from ..._support.http_guard import QUEUE, Guard, guarded_server, require_token
from ..._support.secrets import get_logger, register
from ...config.settings import settings
from ...messages import ToolResult, ToolSpec

logger = get_logger("nexusflow.acp")

CallServedTool = Callable[[str, dict[str, Any]], Awaitable[ToolResult]]


@dataclass(frozen=True)
class ServedToolkit:
    name: str
    url: str
    token: str
    tools: tuple[str, ...]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@asynccontextmanager
async def serve_toolkit(specs: list[ToolSpec], call: CallServedTool) -> AsyncIterator[ServedToolkit]:
    """Serve ``specs`` until the context exits; every call goes to ``call``. The MCP server
    SDK is imported here, not with the module: it costs ~0.4 s that a one-shot run never needs."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    name = f"nexusflow_{secrets.token_hex(3)}"
    token = secrets.token_urlsafe(24)
    register(token)
    listed = [
        types.Tool(name=spec.name, description=spec.function.description, input_schema=spec.function.parameters)
        for spec in specs
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result = await call(params.name, params.arguments or {})
        # Structured content too, as an object: gemini parses a text result that is bare JSON
        # (a number, say) into structuredContent itself and then refuses it for not being one.
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.content)],
            structured_content={"result": result.content},
            is_error=result.is_error,
        )

    limits = settings()
    guard = Guard(limits.served_max_unauthorised, limits.served_idle_timeout)
    server = Server(name, on_list_tools=list_tools, on_call_tool=call_tool)
    app = require_token(server.streamable_http_app(json_response=True), token, guard)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this; without it each response waits ~40 ms for a delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    web = guarded_server(app, guard, limits.served_shutdown_timeout)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(web.serve, [sock])
            while not web.started:
                await anyio.sleep(0.01)
            sock.listen(QUEUE)
            try:
                yield ServedToolkit(name, f"http://127.0.0.1:{port}/mcp", token, tuple(spec.name for spec in specs))
            finally:
                web.should_exit = True
    finally:
        sock.close()
