"""A real agent CLI drives a durable run through ``nexusflow mcp``: claude, in its own loop
(``claude -p``), given the server in its MCP configuration and the scripted model server as
its model. Its model starts a run that asks for an approval, waits for it to wait, answers
it and reads the result; the run's tool ran once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nexusflow import CliStyles
from nexusflow.testing import ScriptedReply
from nexusflow.testing.conformance import scripted_cli

from approvals import LOGGED_DEPLOY
from live_agents import binary

pytestmark = [pytest.mark.anyio]

TOOLS = LOGGED_DEPLOY


async def test_claude_starts_waits_answers_and_reads_a_run_through_nexusflow_mcp(tmp_path: Path):
    claude = binary("claude")
    tools = tmp_path / "front_tools.py"
    tools.write_text(TOOLS)
    deployed = tmp_path / "deployed.log"
    session = f"live-mcp-{uuid.uuid4().hex}"
    replies = [
        ScriptedReply.call("start_run", {"prompt": 'call deploy {"service": "web"}', "session_id": session}),
        ScriptedReply.call("get_run", {"session_id": session, "wait": 50}),
        ScriptedReply.call("answer", {"session_id": session, "request_id": f"{session}.0.0", "approve": True}),
        ScriptedReply.call("get_run", {"session_id": session, "wait": 50}),
        ScriptedReply.say("Deployed web."),
    ]
    passed = {name: os.environ[name] for name in os.environ if name.startswith(("PREFECT_", "NEXUSFLOW_"))}
    config = {
        "mcpServers": {
            "nexusflow": {
                "command": sys.executable,
                "args": ["-m", "nexusflow", "mcp", "--tools", f"{tools}:deploy"],
                "env": {
                    **passed,
                    "DEPLOYED_LOG": str(deployed),
                    "PATH": os.environ["PATH"],
                    "NEXUSFLOW_MCP_START_WAIT": "300",
                },
            }
        }
    }
    async with scripted_cli(CliStyles.CLAUDE, replies) as (server, home, env):
        (home / "mcp.json").write_text(json.dumps(config))
        done = subprocess.run(
            [
                claude,
                "-p",
                "Deploy web through nexusflow.",
                "--mcp-config",
                str(home / "mcp.json"),
                "--strict-mcp-config",
                "--allowedTools",
                "mcp__nexusflow__start_run,mcp__nexusflow__get_run,mcp__nexusflow__answer",
                "--output-format",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=home,
            env={**os.environ, **env, "ENABLE_TOOL_SEARCH": "false"},  # MCP tools offered directly, not deferred
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert json.loads(done.stdout)["result"] == "Deployed web."
        results = [_tool_results(request.body) for request in server.turns()]
        offered = [[tool.get("name") for tool in request.body.get("tools", [])] for request in server.turns()]
        assert offered and all("mcp__nexusflow__start_run" in names for names in offered), (
            str(offered[0]),
            done.stderr[-2000:],
        )
    said = [text for found in results for text in found]
    assert len(said) == 4 and all(text.startswith("{") for text in said), said
    started, waiting, answered, finished = (json.loads(text) for text in said)
    assert started["session_id"] == session and started["flow_run_id"]
    assert waiting["state"] == "waiting" and waiting["waiting"]["tool"] == "deploy", waiting
    assert answered["approved"] is True and answered["flow_run_id"] != started["flow_run_id"]
    assert finished["state"] == "completed" and finished["text"] == "deploy: deployed web", finished
    assert deployed.read_text() == "web\n", "the approved tool ran once"


def _tool_results(body: object) -> list[str]:
    """The text of each tool result the request carries last (Anthropic Messages)."""
    if not isinstance(body, dict) or not body.get("messages"):
        return []
    last = body["messages"][-1]
    found = []
    for block in last.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
            found.append(str(content))
    return found
