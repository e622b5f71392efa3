"""``nexusflow mcp`` for a new user: no ``PREFECT_API_URL`` and no ``nexusflow server``, so the
server and each run it starts in the background use an embedded Prefect server of their own
on the home's one database. A run started, then answered and read by a server started again
in between."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from approvals import LOGGED_DEPLOY
from helpers.homes import new_user_environment

pytestmark = [pytest.mark.anyio]


@asynccontextmanager
async def served(env: dict[str, str], tools: Path) -> AsyncIterator[Client]:
    args = ["-m", "nexusflow", "mcp", "--tools", f"{tools}:deploy"]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with Client(stdio_client(params), read_timeout_seconds=300) as client:
        yield client


async def view(client: Client, session: str, wait: float = 10) -> dict[str, Any]:
    result = await client.call_tool("get_run", {"session_id": session, "wait": wait})
    assert not result.is_error and result.structured_content is not None, result.content
    return result.structured_content


async def test_a_new_users_mcp_server_starts_answers_and_reads_a_run_on_the_embedded_default(tmp_path: Path):
    env = {**new_user_environment(tmp_path / "home"), "NEXUSFLOW_MCP_START_WAIT": "300"}
    env["DEPLOYED_LOG"] = str(tmp_path / "deployed.log")
    tools = tmp_path / "tools.py"
    tools.write_text(LOGGED_DEPLOY)
    async with served(env, tools) as client:
        started = await client.call_tool("start_run", {"prompt": 'call deploy {"service": "web"}'})
        assert not started.is_error and started.structured_content is not None, started.content
    session = started.structured_content["session_id"]
    assert started.structured_content["flow_run_id"] is not None
    async with served(env, tools) as client:  # started again: it finds the run in the home's database
        with anyio.fail_after(240):
            while (seen := await view(client, session))["state"] == "running":
                pass
        assert seen["state"] == "waiting", seen
        request = seen["waiting"]["request_id"]
        answered = await client.call_tool("answer", {"session_id": session, "request_id": request, "approve": True})
        assert not answered.is_error, answered.content
        with anyio.fail_after(240):
            while (seen := await view(client, session))["state"] in ("running", "waiting"):
                await anyio.sleep(0.5)
    assert (seen["state"], seen["text"], seen["tool_calls"]) == ("completed", "deploy: deployed web", 1), seen
    assert (tmp_path / "deployed.log").read_text() == "web\n"
