"""Runs whose tools come over MCP, on the session's server: a run using MCP servers over stdio
and over HTTP and a skill; and a run that completes while another process holds 20,000 idle
connections to the toolkit served to its ACP agent (issue 41). The same servers and endpoint
with no run: tests/offline/test_mcp.py, tests/offline/test_served.py."""

import os
import resource
import subprocess
import sys
import time

import anyio
import pytest

from nexusflow import RunResult, Toolkit, Transport, create_cli_client

from helpers.mcp_endpoints import SERVER, add, port
from paths import HELPERS


@pytest.mark.slow
@pytest.mark.anyio
async def test_mcp_over_stdio_and_http_and_skills_used_by_a_run(http_server, monkeypatch, tmp_path, session_id):
    from nexusflow import create_in_process_client
    from nexusflow.testing import ScriptedModel

    url, token = http_server
    monkeypatch.setenv("NF_MCP_TOKEN", token)
    skill_dir = tmp_path / "skills" / "tone"
    skill_dir.mkdir(parents=True)
    (skill_dir / "SKILL.md").write_text("---\nname: tone\ndescription: House tone.\n---\nAlways shout the product.\n")
    config = {
        "mcpServers": {
            "calc": {"command": sys.executable, "args": [SERVER, "stdio"]},
            "remote": {"url": url, "headers": {"Authorization": "Bearer ${NF_MCP_TOKEN}"}, "toolPrefix": "remote_"},
        }
    }
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "skill", "arguments": {"name": "tone"}}]},
            {"tool_calls": [{"name": "multiply", "arguments": {"a": 6, "b": 7}}]},
            lambda r: {
                "tool_calls": [{"name": "remote_shout", "arguments": {"text": f"answer {r.messages[-1].content}"}}]
            },
            lambda r: r.messages[-1].content,
        ]
    )
    async with await Toolkit.load(mcp_config=config, skills_dir=tmp_path / "skills") as kit:
        result = await create_in_process_client(model).run("compute", kit, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "ANSWER 42"
    first = model.requests[0]
    assert "- tone: House tone." in first.messages[0].content
    assert {"skill", "multiply", "remote_shout"} <= {t.name for t in first.tools}
    assert result.messages[3].content == "Always shout the product."


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.xdist_group("heavy")  # its flood takes a core for half a minute: not beside the other heavy ones
async def test_a_run_completes_while_another_process_holds_20000_idle_connections(agent, session_id):
    """The issue's attack: 19,990 idle connections used up the run's descriptors and failed
    its turn. The agent's tool call (a new connection) is made while the flood holds."""
    agent.script([[{"await": "go"}, {"tool": "add", "arguments": {"a": 1, "b": 2}}, {"say": "3"}]])
    client = create_cli_client(agent.style, agent.command, transport=Transport.ACP, env=agent.env, timeout=240)
    before, peak = open_descriptors(), 0
    flood: subprocess.Popen[str] | None = None
    outcome: dict[str, RunResult] = {}

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, open_descriptors())
            await anyio.sleep(0.02)

    async def run() -> None:
        async with await Toolkit.load(tools=[add]) as toolkit:
            outcome["result"] = await client.run("go", toolkit, session_id=session_id)

    try:
        with anyio.fail_after(300):
            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                group.start_soon(run)
                while not agent.received("session/prompt"):
                    await anyio.sleep(0.05)
                url = agent.received("session/new")[0]["params"]["mcpServers"][0]["url"]
                command = [sys.executable, str(HELPERS / "flood.py"), str(port(url)), "20000", "60"]
                flood = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                assert flood.stdout is not None
                holding = (await anyio.to_thread.run_sync(flood.stdout.readline)).split()
                assert holding[:1] == ["holding"], holding
                started = time.monotonic()
                (agent.root / "go").touch()
                while "result" not in outcome:
                    await anyio.sleep(0.05)
                took = time.monotonic() - started
                group.cancel_scope.cancel()
    finally:
        if flood is not None:  # it would stop by itself, later
            flood.kill()
            flood.communicate()
    result = outcome["result"]
    assert result.status == "completed", result.error
    assert result.text == "3" and [e["text"] for e in agent.log("tool_result")] == ["3"]
    opened, failed = int(holding[1]), int(holding[2])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert opened >= min(20000, hard - 100) and failed == 0, holding
    assert peak - before < 1000, f"the flood held {peak - before} of the run's descriptors"
    print(f"flood: {opened} held in {holding[3]}s; run after the flood: {took:.2f}s; fds {before} -> peak {peak}")
