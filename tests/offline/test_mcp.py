"""Real MCP servers (the mcp SDK) over stdio and over streamable HTTP on 127.0.0.1, loaded into
a toolkit with no run and no server: listing and calling their tools, a bearer token from the
environment, the failures a config or a server can give. A run using them:
tests/server/transports/test_mcp_runs.py."""

import json
import os
import subprocess
import sys
import time

import pytest

from nexusflow import McpServerError, Toolkit, ToolkitError
from nexusflow._support import secrets
from nexusflow.toolkit import mcp as mcp_module

from helpers.mcp_endpoints import SERVER


def stdio_config(**extra):
    return {"mcpServers": {"calc": {"command": sys.executable, "args": [SERVER, "stdio"], **extra}}}


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


def test_a_server_s_stderr_without_a_newline_is_held_bounded_and_quoted_by_its_end(monkeypatch):
    """A stdio server printing without end on one line: what is held (and redacted) stays
    bounded, and the end of what it said is quoted, with what was cut counted."""
    redacted: list[int] = []

    def counted(text: str) -> str:
        redacted.append(len(text))
        return secrets.redact(text)

    monkeypatch.setattr(mcp_module, "redact", counted)
    tap = mcp_module._StderrTap("loud")
    flood = 5 * 2**20
    tap.file.write("x" * flood + "final words\nbye\n")
    tap.close()
    tap._thread.join(timeout=30)
    assert max(redacted) <= 3 * mcp_module._STDERR_HELD
    kept = mcp_module._STDERR_LINE
    shown = "x" * (kept - len("final words")) + "final words"
    assert tap.tail() == (f"[{flood + len('final words') - kept} characters cut] {shown}\nbye")[-1000:]


def test_a_secret_cut_in_two_where_a_server_s_line_lost_its_start_is_never_half_kept():
    """What is left of a line whose start was dropped unread may begin with the end of a secret
    (its start dropped): as many characters as a secret has are never kept there."""
    secret = "s3cr3t-" + "q" * 25  # 32 characters
    secrets.register(secret)
    try:
        tap = mcp_module._StderrTap("leaky")
        filler = "m" * (secrets.longest() + 40)  # longer than the margin, whatever else is registered
        tap._keep(secret[16:] + " and then " + filler + secret, cut=1000, server="leaky")
        tap._keep("whole: " + secret, cut=0, server="leaky")
        tap.close()
    finally:
        secrets.forget(secret)
    cut, whole = tap._lines
    assert "q" * 10 not in cut and cut.startswith("[") and cut.endswith("***")
    assert whole == "whole: ***"
