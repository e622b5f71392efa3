"""``nexusflow mcp-bridge URL``: an MCP stdio server relaying to a served toolkit over HTTP,
for agents that cannot reach an MCP server over HTTP themselves. The bearer token comes in
the environment (``NEXUSFLOW_MCP_TOKEN``), never in argv where ``ps`` would show it."""

from __future__ import annotations

import os
from typing import Any

import anyio

TOKEN_VARIABLE = "NEXUSFLOW_MCP_TOKEN"


async def _pump(source: Any, sink: Any) -> None:
    async with sink:
        async for message in source:
            if isinstance(message, Exception):
                raise message
            await sink.send(message)


async def bridge(url: str) -> None:
    import httpx2  # the MCP SDK loads here, in the bridge's own process, never with the transport
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.stdio import stdio_server

    token = os.environ.get(TOKEN_VARIABLE, "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=3600)) as http,
        streamable_http_client(url, http_client=http) as (remote_read, remote_write),
        stdio_server() as (local_read, local_write),
        anyio.create_task_group() as group,
    ):
        group.start_soon(_pump, local_read, remote_write)
        await _pump(remote_read, local_write)
        group.cancel_scope.cancel()
