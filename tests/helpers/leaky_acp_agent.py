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
answer = acp_agent.Agent.answer


async def leaky_answer(self: Any, method: str, params: dict[str, Any]) -> Any:
    if method == "session/new":
        sys.stderr.write(f"debug: mcpServers={json.dumps(params.get('mcpServers'))}\n")
        sys.stderr.flush()
    return await answer(self, method, params)


acp_agent.Agent.answer = leaky_answer
asyncio.run(acp_agent.main())
