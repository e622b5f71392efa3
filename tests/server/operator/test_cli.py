"""The `nexusflow` command running, as a user runs it: a real process against the test server
where the process is the point (a run, a module found from the working directory, the demo),
else its ``main`` in this process (the same output and exit status, without a start-up each).
What it answers without a run (usage errors, help, version) is tested without a server
(tests/offline/test_cli_refusals.py)."""

import json
import os
import re
import subprocess
import sys

import pytest

from nexusflow import AcpLaunch

from acp_fixtures import ACP_AGENT
from helpers.command import nexusflow_here
from helpers.prefect_api import task_runs


def nexusflow(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexusflow", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=os.environ.copy(),
    )


TOOLS = '''
from nexusflow import tool

@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

def greet(name: str) -> str:
    """Greet."""
    return "hello " + name

both = [add, greet]
'''


@pytest.fixture
def tools_file(tmp_path):
    path = tmp_path / "mytools.py"
    path.write_text(TOOLS)
    return path


@pytest.mark.slow
def test_run_prints_only_the_answer_on_stdout(tools_file, session_id):
    prompt = 'call add {"a": 2, "b": 3}\ncall greet {"name": "ann"}\n\ncall add {"a": 10, "b": 5}'
    done = nexusflow("run", prompt, "--tools", f"{tools_file}:both", "--session", session_id)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "add: 5\ngreet: hello ann\nadd: 15\n"
    assert "nexusflow: completed — 3 turns, 3 tool calls" in done.stderr
    assert "Prefect UI" in done.stderr and "/runs/flow-run/" in done.stderr


@pytest.mark.slow
def test_run_with_a_module_path_and_a_script(tools_file, tmp_path, session_id):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}, "it is 2"]))
    done = nexusflow(
        "run",
        "what is 1+1?",
        "--tools",
        "mytools:add",
        "--script",
        str(script),
        "--session",
        session_id,
        cwd=tools_file.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "it is 2\n"


@pytest.mark.slow
def test_a_failed_run_exits_non_zero_with_the_error(tools_file, session_id, capsys):
    done = nexusflow_here(
        capsys,
        "run",
        'call add {"a": 1, "b": 2}',
        "--tools",
        f"{tools_file}:add",
        "--max-turns",
        "1",
        "--session",
        session_id,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "nexusflow: error: max turns exceeded: no final answer after 1 turns" in done.stderr


@pytest.mark.slow
def test_a_bad_mcp_config_is_a_clear_error(tmp_path, capsys):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"ghost": {"command": "nexusflow-no-such-binary"}}}))
    done = nexusflow_here(capsys, "run", "hi", "--mcp-config", str(config))
    assert done.returncode == 1
    assert 'nexusflow: error: mcp: server "ghost" failed to start' in done.stderr


@pytest.mark.slow
@pytest.mark.anyio
async def test_demo_runs_a_multi_step_tool_calling_run(session_id):
    done = nexusflow("demo", "--session", session_id)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "Paris is warmer: 18.5 °C against Oslo's 7.0 °C, a difference of 20.7 °F.\n"
    assert "3 turns, 3 tool calls" in done.stderr
    flow_run_id = re.search(r"/runs/flow-run/([0-9a-f-]{36})", done.stderr).group(1)
    runs = await task_runs(flow_run_id, expected=6, timeout=0)
    assert sorted(run.name for run in runs if run.state.is_final()) == [
        "tool-0-current_temperature",
        "tool-0-current_temperature-2",
        "tool-1-celsius_to_fahrenheit_delta",
        "turn-0",
        "turn-1",
        "turn-2",
    ], "the command waits until the server has recorded every step before it exits"


@pytest.mark.slow
def test_run_drives_an_agent_cli_through_its_style(fake, tools_file, session_id, capsys):
    from cli_fixtures import envelope_answer, envelope_calls, styled

    fake.script(
        styled("claude", envelope_calls({"name": "add", "arguments": {"a": 2, "b": 3}})),
        styled("claude", envelope_answer("2 + 3 = 5")),
    )
    done = nexusflow_here(
        capsys,
        "run",
        "what is 2+3?",
        "--style",
        "Claude",
        "--command",
        fake.command,
        "--model",
        "sonnet",
        "--tools",
        f"{tools_file}:add",
        "--session",
        session_id,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "2 + 3 = 5\n"
    assert [call["argv"][-2:] for call in fake.calls()] == [["--model", "sonnet"]] * 2


@pytest.mark.slow
def test_run_reaches_the_acp_transport_through_the_acp_command(agent, tmp_path, session_id, capsys):
    """The style speaks ACP only through an adapter and `--command` is /bin/false, so an answer
    proves that both `--transport acp` and `--acp-command` reached the client."""
    launch = AcpLaunch(args=[str(ACP_AGENT)], adapter=True, env={"ACP_AGENT_DIR": str(agent.root)}, verified="test")
    style_file = tmp_path / "style.json"
    style_file.write_text(agent.style.model_copy(update={"acp": launch}).model_dump_json())
    agent.script([[{"say": "hello over ACP"}]])
    acp = ("run", "hi", "--style-file", str(style_file), "--command", "/bin/false", "--transport", "acp")

    done = nexusflow_here(capsys, *acp, "--acp-command", sys.executable, "--session", session_id)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "hello over ACP\n"
    (initialize,) = agent.received("initialize")
    assert initialize["params"]["protocolVersion"] == 1

    forced = nexusflow_here(capsys, *acp, "--session", f"{session_id}-no-adapter")
    assert forced.returncode == 1, "--transport acp never falls back to the one-shot CLI"
    assert "pass its path as acp_command" in forced.stderr
    assert len(agent.received("initialize")) == 1
