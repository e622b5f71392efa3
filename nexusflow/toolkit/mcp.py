"""MCP servers from an ``mcp.json`` (the Claude-desktop shape), reached through the mcp SDK.

``${VAR}`` in a server's command, args, env, url and headers is expanded when the server
is started; the expanded values go straight to the SDK and are never kept or logged, and
are redacted from whatever a server prints.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._support.secrets import get_logger, longest, redact
from ..config._env import expand, expand_all
from ..errors import McpCallError, describe
from ..messages import FunctionSpec, ToolResult, ToolSpec
from .errors import mcp_config_invalid, mcp_config_not_json, mcp_config_unreadable, mcp_server_failed

if TYPE_CHECKING:  # the MCP SDK costs ~0.4 s to import: only runs with an MCP server pay it
    from mcp import Client
    from mcp_types import CallToolResult

logger = get_logger("nexusflow.mcp")

_STDERR_TAIL_LINES = 20
_STDERR_LINE = 4 * 2**10
"""Characters of one stderr line kept and logged: its end."""
_STDERR_HELD = 64 * 2**10
"""Characters of a line still growing held as they came, before it is redacted and cut (once
it ends): a line twice as long drops its start unread, so a server that prints without a
newline cannot grow our memory."""


class _ServerBase(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    disabled: bool = False
    tool_prefix: str = Field(default="", alias="toolPrefix")
    startup_timeout: float = Field(
        default=30.0,
        alias="startupTimeout",
        gt=0,
        description="Seconds the whole start may take: the handshake (the SDK's protocol probe, then"
        " initialize) and listing the tools.",
    )
    timeout: float = Field(default=600.0, gt=0, description="Seconds one tool call may take.")


class StdioServer(_ServerBase):
    type: Literal["stdio"] = "stdio"
    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class RemoteServer(_ServerBase):
    type: Literal["http", "streamable-http", "streamableHttp", "sse"] = "http"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)


class McpConfig(BaseModel):
    mcp_servers: dict[str, StdioServer | RemoteServer] = Field(alias="mcpServers")


def load_mcp_config(source: str | Path | dict[str, Any]) -> McpConfig:
    """Read an ``mcp.json`` path or an already-parsed dict. Errors name the offending key,
    never a value: a header or env value may be a secret."""
    where = "mcp config" if isinstance(source, dict) else str(source)
    if isinstance(source, dict):
        data = source
    else:
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except OSError as exc:
            raise mcp_config_unreadable(where, exc) from exc
        except json.JSONDecodeError as exc:
            raise mcp_config_not_json(where, exc) from exc
    try:
        return McpConfig.model_validate(data)
    except ValidationError as exc:
        raise mcp_config_invalid(where, exc) from exc


class _StderrTap:
    """A pipe for a stdio server's stderr: lines go to the debug log and the last few are
    kept, so that a server that dies at start-up is reported with what it said. Each line
    is redacted first: a server may print the token it was given."""

    def __init__(self, server: str) -> None:
        read_fd, write_fd = os.pipe()
        self.file = os.fdopen(write_fd, "w")
        self._lines: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._thread = threading.Thread(target=self._drain, args=(read_fd, server), daemon=True)
        self._thread.start()

    def _drain(self, fd: int, server: str) -> None:
        line, cut = "", 0
        with os.fdopen(fd, encoding="utf-8", errors="replace") as pipe:
            while piece := pipe.readline(_STDERR_HELD):
                line += piece
                if piece.endswith("\n"):
                    self._keep(line.removesuffix("\n"), cut, server)
                    line, cut = "", 0
                elif len(line) > 2 * _STDERR_HELD:
                    cut += len(line) - _STDERR_HELD
                    line = line[-_STDERR_HELD:]
        if line:
            self._keep(line, cut, server)

    def _keep(self, line: str, cut: int, server: str) -> None:
        """The line's end, redacted before it is cut; when its start was dropped unread, a
        secret may have been cut in two there, and its end is never kept."""
        redacted = redact(line)
        start = max(len(redacted) - _STDERR_LINE, min(longest() if cut else 0, len(redacted)))
        text = redacted[start:]
        if cut + start:
            text = f"[{cut + start} characters cut] {text}"
        self._lines.append(text)
        logger.debug("[%s] %s", server, text)

    def tail(self) -> str:
        self._thread.join(timeout=0.5)
        return "\n".join(self._lines)[-1000:]

    def close(self) -> None:
        self.file.close()


def _render(result: CallToolResult) -> str:
    from mcp_types import EmbeddedResource, ImageContent, TextContent

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            parts.append(f"[image: {block.mime_type}]")
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource: {resource.uri}]")
        else:
            parts.append(block.model_dump_json(exclude_none=True))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


class McpTool:
    """One tool of a connected MCP server, under the name the model sees."""

    def __init__(self, server: str, client: Client, remote_name: str, spec: ToolSpec, timeout: float) -> None:
        self.server = server
        self.name = spec.name
        self.spec = spec
        self._client = client
        self._remote_name = remote_name
        self._timeout = timeout

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        try:
            result = await self._client.call_tool(self._remote_name, arguments, read_timeout_seconds=self._timeout)
        except Exception as exc:
            raise McpCallError(describe(exc)) from exc
        text = _render(result)
        if result.is_error:
            return ToolResult(content=f'error: tool "{self.name}" failed: {text}', is_error=True)
        return ToolResult(content=text)


def _transport(name: str, server: StdioServer | RemoteServer, stack: AsyncExitStack) -> Any:
    if isinstance(server, StdioServer):
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        tap = _StderrTap(name)
        stack.callback(tap.close)
        params = StdioServerParameters(
            command=expand(server.command),
            args=[expand(arg) for arg in server.args],
            env=expand_all(server.env),
            cwd=expand(server.cwd) if server.cwd else None,
        )
        return stdio_client(params, errlog=tap.file), tap
    url = expand(server.url)
    headers = expand_all(server.headers)
    if server.type == "sse":
        from mcp.client.sse import sse_client

        return sse_client(url, headers=headers, timeout=server.startup_timeout), None
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(server.startup_timeout, read=server.timeout))
    stack.push_async_callback(http.aclose)
    return streamable_http_client(url, http_client=http), None


async def connect_server(name: str, server: StdioServer | RemoteServer, stack: AsyncExitStack) -> list[McpTool]:
    """Start (or reach) one server and list its tools; the connection lives in ``stack``.
    Any failure, including a server that exits or never answers, names the server.

    ``startupTimeout`` bounds the whole start. The SDK's protocol probe has a fixed 10 s
    timeout of its own (a mute server took 13 s to fail under a startupTimeout of 1), so the
    connection is held by a task of its own, which a deadline can cancel cleanly."""
    from mcp import Client

    tap: _StderrTap | None = None
    closing = anyio.Event()

    async def hold(*, task_status: anyio.abc.TaskStatus[tuple[Any, Any]]) -> None:
        nonlocal tap
        async with AsyncExitStack() as server_stack:
            transport, tap = _transport(name, server, server_stack)
            client = Client(transport, read_timeout_seconds=server.startup_timeout, cache=None)
            await server_stack.enter_async_context(client)
            task_status.started((client, await client.list_tools()))
            await closing.wait()

    group = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(closing.set)
    try:
        with anyio.fail_after(server.startup_timeout):
            client, listed = await group.start(hold)
    except Exception as exc:
        said = tap.tail() if tap is not None else ""
        raise mcp_server_failed(name, exc, server.startup_timeout, said) from exc
    return [
        McpTool(
            name,
            client,
            remote.name,
            ToolSpec(
                function=FunctionSpec(
                    name=f"{server.tool_prefix}{remote.name}",
                    description=remote.description or "",
                    parameters=remote.input_schema or {"type": "object", "properties": {}},
                )
            ),
            server.timeout,
        )
        for remote in listed.tools
    ]
