"""The `nexusflow` command's edges, as a user meets them: its exit status, and stderr that is one
line (never a traceback) when the command cannot go on. A real process where the process is the
point (a command run as printed, from another directory, a new user's home, a pipe's reader that
leaves), else ``main`` in this process: the same output and status, without a start-up each.
The edges met before any run or server (an unusable output type, a missing CLI, the version)
are tested without a server (tests/offline/test_command_before_a_run.py)."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest

from approvals import ASKING_DEPLOY
from helpers.command import nexusflow_here, one_line
from helpers.homes import new_user_environment

ASKING_TOOLS = (
    ASKING_DEPLOY
    + '''
from nexusflow import tool

@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
'''
)


def nexusflow(*args: str, cwd=None, env=None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexusflow", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env if env is not None else os.environ.copy(),
    )


@pytest.fixture
def asking(tmp_path):
    path = tmp_path / "asking.py"
    path.write_text(ASKING_TOOLS)
    return path


@pytest.mark.slow
def test_a_pending_run_prints_an_answer_command_that_works_as_copied(asking, tmp_path, session_id, capsys):
    """The printed command has no --tools: the session's invocation, kept in result storage,
    brings them back, from another directory too."""
    pending = nexusflow_here(
        capsys, "run", 'call deploy {"service": "web"}', "--tools", f"{asking}:deploy", "--session", session_id
    )
    assert pending.returncode == 3, pending.stderr[-3000:]
    (approve,) = re.findall(r"^nexusflow: approve with: (.*)$", pending.stderr, re.MULTILINE)
    argv = shlex.split(approve)
    assert shutil.which(argv[0]), f"{argv[0]} runs as printed"
    assert argv[1:] == ["answer", session_id, "--approve"]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    answered = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=elsewhere, env=os.environ.copy())
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert answered.stdout == "deploy: deployed web\n"
    assert "(1 turn and 1 tool call replayed)" in answered.stderr
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert again.returncode == 2, "an answer is used once"
    assert one_line(again) == f'nexusflow: session "{session_id}" is not waiting for an answer'


@pytest.mark.slow
def test_an_answer_without_the_tool_the_session_waits_for_fails_in_one_line(asking, session_id, capsys):
    pending = nexusflow_here(
        capsys, "run", 'call deploy {"service": "db"}', "--tools", f"{asking}:deploy", "--session", session_id
    )
    assert pending.returncode == 3, pending.stderr[-3000:]
    answered = nexusflow_here(capsys, "run", "--session", session_id, "--answer", "approve", "--tools", f"{asking}:add")
    assert answered.returncode == 2
    assert f'session "{session_id}" waits to run the tool "deploy", which this toolkit lacks' in one_line(answered)


@pytest.mark.slow
def test_a_typed_run_prints_its_output_as_one_line_of_json(output_types, session_id, capsys):
    """The scripted agent echoes the prompt: the answer as written is fenced and spaced, the
    output printed is the validated value, compact."""
    done = nexusflow_here(
        capsys,
        "run",
        '```json\n{"x": 1, "y": 2}\n```',
        "--output-type",
        f"{output_types}:Point",
        "--session",
        session_id,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == '{"x":1,"y":2}\n'


@pytest.mark.slow
def test_a_pending_typed_run_answered_from_elsewhere_keeps_its_output_type(
    asking, output_types, tmp_path, session_id, capsys
):
    """The answer names no type: the session's invocation brings it back. The scripted agent
    of the answer (``--script``, replacing the prompt-following one) writes the final answer.
    The answer is a process of its own, in another directory, which never imported the types."""
    typed = f"{output_types}:Report"
    pending = nexusflow_here(
        capsys,
        "run",
        'call deploy {"service": "web"}',
        "--tools",
        f"{asking}:deploy",
        "--output-type",
        typed,
        "--session",
        session_id,
    )
    assert pending.returncode == 3, pending.stderr[-3000:]
    assert pending.stdout == ""
    script = tmp_path / "final.json"
    # One reply per turn: turn 0 (the call) is replayed, turn 1 writes the answer.
    deploy = {"tool_calls": [{"name": "deploy", "arguments": {"service": "web"}}]}
    script.write_text(json.dumps([deploy, '```json\n{"title": "deployed web", "severity": 1}\n```']))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    answered = nexusflow("run", "--session", session_id, "--answer", "approve", "--script", str(script), cwd=elsewhere)
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert answered.stdout == '{"title":"deployed web","severity":1}\n'
    assert "(1 turn and 1 tool call replayed)" in answered.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "hi", "--max-turns", "0"], "--max-turns must be 1 or more, not 0"),
        (["run", "hi", "--max-turns", "-3"], "--max-turns must be 1 or more, not -3"),
        (["run", "hi", "--max-cost-usd", "0"], "--max-cost-usd must be more than 0, not 0"),
        (["run", "hi", "--max-tokens", "-5"], "--max-tokens must be more than 0, not -5"),
        (["run", "hi", "--mcp-config", "no-such-mcp.json"], "--mcp-config: cannot read "),
        (["run", "hi", "--skills-dir", "no-such-folder"], "no-such-folder is not a directory"),
        (["run", "hi", "--tools", "no_such_file.py:x"], "--tools: no such file: no_such_file.py"),
        (["run", "hi", "--timeout", "0"], "--timeout must be more than 0 seconds"),
        (["answer", str(uuid.uuid4()), "--approve"], "no flow run"),
        (["answer", "no-such-session-x3", "--approve"], 'session "no-such-session-x3" is not waiting for an answer'),
        (["answer", "no/such", "--approve"], "invalid session id 'no/such'"),
        (["run", "--session", "no-such-session-x1", "--answer", "approve"], "is not waiting for an answer"),
        (["run", ""], "run needs a PROMPT with something in it"),
        (["run", " \n\t "], "run needs a PROMPT with something in it"),
        (["run", "hi", "--style", "clod", "--command", "x"], 'cli: unknown style "clod"'),
        (["run", "hi", "--style", "claude"], "cli: Command is required (path or name of the CLI binary)"),
        (["show", "no-such-session-x2"], 'no run is known as "no-such-session-x2"'),
        (["show", str(uuid.uuid4())], "no run is known as"),
    ],
)
def test_usage_errors_exit_2_in_one_line(args, message, capsys):
    done = nexusflow_here(capsys, *args)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    assert message in one_line(done)


@pytest.mark.slow
def test_answer_refuses_a_run_that_is_not_waiting(session_id, capsys):
    done = nexusflow_here(capsys, "run", "hello", "--session", session_id)
    assert done.returncode == 0, done.stderr[-3000:]
    flow_run_id = re.search(r"/runs/flow-run/([0-9a-f-]{36})", done.stderr).group(1)
    answered = nexusflow_here(capsys, "answer", flow_run_id, "--approve")
    assert answered.returncode == 2
    assert one_line(answered) == f"nexusflow: flow run {flow_run_id} is not waiting for an answer: it is Completed"


@pytest.mark.slow
def test_the_summary_counts_tool_errors_in_the_singular_too(asking, session_id, capsys):
    done = nexusflow_here(capsys, "run", 'call add {"a": 1}', "--tools", f"{asking}:add", "--session", session_id)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "completed — 2 turns, 1 tool call, 1 tool error (0 turns and 0 tool calls replayed),"
        f" tokens ? in / ? out · cost $?, session {session_id}" in (done.stderr)
    )
    single = nexusflow_here(capsys, "run", "hello", "--session", f"{session_id}-2")
    assert "completed — 1 turn, 0 tool calls (" in single.stderr


@pytest.mark.slow
def test_show_prints_the_transcript_and_the_steps(asking, session_id, capsys):
    done = nexusflow_here(
        capsys, "run", 'call add {"a": 2, "b": 3}', "--tools", f"{asking}:add", "--session", session_id
    )
    assert done.returncode == 0, done.stderr[-3000:]
    flow_run_id = re.search(r"/runs/flow-run/([0-9a-f-]{36})", done.stderr).group(1)
    for run_id in (session_id, flow_run_id):
        shown = nexusflow_here(capsys, "show", run_id)
        assert shown.returncode == 0, shown.stderr[-3000:]
        assert 'call add {"a": 2, "b": 3}' in shown.stdout and "add: 5" in shown.stdout, "the transcript"
        assert f"flow run agent-{session_id} ({flow_run_id}): Completed" in shown.stdout
        steps = re.findall(r"^  (\S+)\s+(\S+)\s+([0-9.]+)s$", shown.stdout, re.MULTILINE)
        assert [(name, state) for name, state, _ in steps] == [
            ("turn-0", "Completed"),
            ("tool-0-add", "Completed"),
            ("turn-1", "Completed"),
        ]


@pytest.mark.slow
def test_a_new_users_demo_prints_no_traceback_and_no_error():
    with tempfile.TemporaryDirectory() as home:
        env = new_user_environment(home)
        done = nexusflow("demo", env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "Starting temporary server" in output, "the embedded server ran"
    assert "Traceback" not in output and "ERROR" not in output, output[-3000:]
    (hint,) = re.findall(r"See it in the Prefect UI: run `(.*)`, then open (\S+)", done.stderr)
    command, link = hint
    assert shlex.split(command)[1:] == ["server"] and shutil.which(shlex.split(command)[0]), command
    assert link.startswith(f"http://127.0.0.1:{env['PREFECT_SERVER_API_PORT']}/runs/flow-run/")


@pytest.mark.parametrize(
    ("args", "lines_read"),
    # A short output fits the pipe's buffer: read first, it could all be written before the
    # reader leaves, so that reader leaves before the first line.
    [(["styles", "list"], 0), (["run", "long", "--script", "LONG"], 1)],
    ids=["short", "long"],
)
@pytest.mark.slow
def test_output_piped_into_head_ends_quietly(args, lines_read, tmp_path):
    """The reader leaves early: no BrokenPipeError, nothing on stderr about it, and the
    status a shell gives a program that SIGPIPE stopped."""
    script = tmp_path / "long.json"
    script.write_text(json.dumps(["line\n" * 200_000]))
    argv = [str(script) if arg == "LONG" else arg for arg in args]
    process = subprocess.Popen(
        [sys.executable, "-m", "nexusflow", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stderr is not None
    first = [process.stdout.readline() for _ in range(lines_read)]
    process.stdout.close()
    with process.stderr:
        err = process.stderr.read()
    assert process.wait(timeout=300) == 141
    assert all(line.strip() for line in first), "the command printed its first line"
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err[-3000:]


@pytest.mark.slow
def test_the_command_takes_a_budget(tmp_path, session_id, capsys):
    tools = tmp_path / "job_tools.py"
    tools.write_text("def step() -> str:\n    return 'done'\n")
    turn = {"tool_calls": [{"name": "step", "arguments": {}}], "usage": {"cost_usd": 0.01}}
    script = tmp_path / "script.json"
    script.write_text(json.dumps([turn] * 5))
    done = nexusflow_here(
        capsys,
        "run",
        "go",
        "--tools",
        f"{tools}:step",
        "--script",
        str(script),
        "--max-cost-usd",
        "0.02",
        "--session",
        session_id,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"nexusflow: error: budget: session {session_id} spent $0.02 of $0.02 (max_cost_usd)" in done.stderr
    assert "tokens ? in / ? out · cost $0.02" in done.stderr
