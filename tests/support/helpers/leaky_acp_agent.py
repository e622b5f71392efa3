#!/usr/bin/env python3
"""The scripted ACP agent (acp_agent.py), printing the MCP servers it is given on stderr
at ``session/new``, headers and environment included (so our bearer token), as a careless
agent's debug log would."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

spec = importlib.util.spec_from_file_location("acp_agent", Path(__file__).with_name("acp_agent.py"))
assert spec is not None and spec.loader is not None
acp_agent = importlib.util.module_from_spec(spec)
spec.loader.exec_module(acp_agent)


class LeakyAgent(acp_agent.ScriptedAgent):
    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> Any:
        servers = [server.model_dump(mode="json", by_alias=True, exclude_none=True) for server in mcp_servers or []]
        sys.stderr.write(f"debug: mcpServers={json.dumps(servers)}\n")
        sys.stderr.flush()
        return await super().new_session(cwd, mcp_servers, **kwargs)


asyncio.run(acp_agent.main(LeakyAgent))
