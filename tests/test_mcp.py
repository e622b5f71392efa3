"""Real MCP servers (the mcp SDK) over stdio and over streamable HTTP on 127.0.0.1."""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from nexusflow import McpServerError, Toolkit, ToolkitError

from conftest import HELPERS

SERVER = str(HELPERS / "mcp_server.py")


def stdio_config(**extra):
    return {"mcpServers": {"calc": {"command": sys.executable, "args": [SERVER, "stdio"], **extra}}}


@pytest.fixture(scope="module")
def http_server() -> Iterator[tuple[str, str]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = os.urandom(8).hex()
    process = subprocess.Popen([sys.executable, SERVER, "http", str(port), token])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the MCP HTTP test server did not start") from None
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp", token
    process.terminate()
    process.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.anyio
async def test_stdio_server_tools_are_listed_and_called(monkeypatch):
    monkeypatch.setenv("NF_TEST_SECRET", "from-parent")
    config = stdio_config(env={"GREETING": "${NF_TEST_SECRET}"})
    async with await Toolkit.load(mcp_config=config) as kit:
        assert {"multiply", "shout", "server_env", "broken"} <= set(kit.names)
        spec = next(s for s in kit.specs() if s.name == "multiply")
        assert spec.function.description == "Multiply two integers."
        assert spec.function.parameters["properties"]["a"]["type"] == "integer"
        assert (await kit.call("multiply", {"a": 6, "b": 7})).content == "42"
        assert (await kit.call("server_env", {"name": "GREETING"})).content == "from-parent"
        broken = await kit.call("broken", {})
        assert broken.is_error and broken.content.startswith('error: tool "broken" failed:')


@pytest.mark.slow
@pytest.mark.anyio
async def test_tool_prefix_and_config_file(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(stdio_config(toolPrefix="calc_")))
    async with await Toolkit.load(mcp_config=path) as kit:
        assert "calc_multiply" in kit.names
        assert (await kit.call("calc_multiply", {"a": 2, "b": 3})).content == "6"


@pytest.mark.anyio
async def test_http_server_with_bearer_header_from_environment(http_server, monkeypatch):
    url, token = http_server
    monkeypatch.setenv("NF_MCP_TOKEN", token)
    config = {
        "mcpServers": {"remote": {"type": "http", "url": url, "headers": {"Authorization": "Bearer ${NF_MCP_TOKEN}"}}}
    }
    async with await Toolkit.load(mcp_config=config) as kit:
        assert (await kit.call("shout", {"text": "quiet"})).content == "QUIET"


@pytest.mark.anyio
async def test_http_server_refusing_the_token_is_a_clear_error(http_server, monkeypatch):
    url, _ = http_server
    monkeypatch.setenv("NF_MCP_TOKEN", "wrong-token-value")
    config = {"mcpServers": {"remote": {"url": url, "headers": {"Authorization": "Bearer ${NF_MCP_TOKEN}"}}}}
    with pytest.raises(McpServerError, match='mcp: server "remote" failed to start') as caught:
        await Toolkit.load(mcp_config=config)
    assert "wrong-token-value" not in str(caught.value)


@pytest.mark.anyio
async def test_a_server_quoting_its_secret_on_stderr_does_not_leak_it(monkeypatch):
    monkeypatch.setenv("NF_SERVER_TOKEN", "tok-4f9a1c-very-secret")
    script = "import os, sys; print('rejected token', os.environ['TOKEN'], file=sys.stderr); sys.exit(1)"
    config = {
        "mcpServers": {
            "picky": {"command": sys.executable, "args": ["-c", script], "env": {"TOKEN": "${NF_SERVER_TOKEN}"}}
        }
    }
    with pytest.raises(McpServerError) as caught:
        await Toolkit.load(mcp_config=config)
    assert "rejected token ***" in str(caught.value)
    assert "tok-4f9a1c-very-secret" not in str(caught.value)


@pytest.mark.anyio
async def test_a_missing_command_names_the_server():
    config = {"mcpServers": {"ghost": {"command": "nexusflow-no-such-binary"}}}
    with pytest.raises(McpServerError, match=r'mcp: server "ghost" failed to start: .*nexusflow-no-such-binary'):
        await Toolkit.load(mcp_config=config)


@pytest.mark.anyio
async def test_a_server_that_exits_at_start_reports_its_stderr():
    script = "import sys; print('config file missing: /etc/x.toml', file=sys.stderr); sys.exit(3)"
    config = {"mcpServers": {"dies": {"command": sys.executable, "args": ["-c", script]}}}
    with pytest.raises(McpServerError, match='mcp: server "dies" failed to start') as caught:
        await Toolkit.load(mcp_config=config)
    assert "config file missing: /etc/x.toml" in str(caught.value)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_server_that_never_answers_fails_within_its_startup_timeout():
    """startupTimeout bounds the whole start: the MCP SDK's own protocol probe waits 10 s,
    which made a mute server take 13 s to fail under a startupTimeout of 1."""
    marker = f"nexusflow-mute-{os.getpid()}"
    script = f"import time; time.sleep(60)  # {marker}"
    config = {"mcpServers": {"mute": {"command": sys.executable, "args": ["-c", script], "startupTimeout": 1}}}
    started = time.monotonic()
    with pytest.raises(McpServerError) as caught:
        await Toolkit.load(mcp_config=config)
    assert time.monotonic() - started < 8  # 1 s, then the SDK's 2 s grace before it terminates the server
    assert str(caught.value) == 'mcp: server "mute" failed to start: no answer within startupTimeout (1s)'
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], f"the mute server is still running: {left}"


@pytest.mark.anyio
async def test_a_missing_variable_names_it_and_not_other_values(monkeypatch):
    monkeypatch.setenv("NF_OTHER_SECRET", "do-not-print")
    monkeypatch.delenv("NF_NOT_SET", raising=False)
    config = stdio_config(env={"A": "${NF_OTHER_SECRET}", "B": "${NF_NOT_SET}"})
    with pytest.raises(McpServerError) as caught:
        await Toolkit.load(mcp_config=config)
    assert str(caught.value) == 'mcp: server "calc" failed to start: environment variable ${NF_NOT_SET} is not set'


@pytest.mark.anyio
async def test_a_failing_server_closes_the_ones_already_started():
    config = {
        "mcpServers": {
            "calc": {"command": sys.executable, "args": [SERVER, "stdio"]},
            "ghost": {"command": "nexusflow-no-such-binary"},
        }
    }
    before = _children()
    with pytest.raises(McpServerError, match='"ghost"'):
        await Toolkit.load(mcp_config=config)
    assert _children() == before


def _children() -> set[int]:
    path = f"/proc/{os.getpid()}/task/{os.getpid()}/children"
    with open(path) as handle:
        return {int(pid) for pid in handle.read().split()}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"servers": {}}, "mcpServers: Field required"),
        ({"mcpServers": {"x": {"args": []}}}, "mcpServers.x"),
    ],
)
@pytest.mark.anyio
async def test_invalid_configs(config, message):
    with pytest.raises(ToolkitError, match=message):
        await Toolkit.load(mcp_config=config)


@pytest.mark.anyio
async def test_unreadable_config_file(tmp_path):
    with pytest.raises(ToolkitError, match="mcp: cannot read"):
        await Toolkit.load(mcp_config=tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(ToolkitError, match="is not JSON"):
        await Toolkit.load(mcp_config=tmp_path / "bad.json")


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_server")
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
