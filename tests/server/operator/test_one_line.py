"""Every expected failure is one line, met as a user meets it: the command (a process that runs
the console script's ``main`` on each case in turn) and Python (a script of its own:
``run_sync``, ``client.run``, ACP, a user's own flow, ``agent_job``). Each fails on any
traceback, ``ERROR`` line or Prefect ``WARNING`` on the console, and finds the one line that
says what failed: the command's ``nexusflow: error: ...``, the Python caller's result. The
runs still end Failed with the pinned message, and the UI's logs of them hold no traceback
and no ERROR. A bug keeps its traceback; ``--debug`` and ``NEXUSFLOW_DEBUG`` keep every one."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

from nexusflow import create_in_process_client

from acp_fixtures import ScriptedAgent
from cli_fixtures import CLAUDE_PINNED, CLAUDE_SAID, CLAUDE_SPENT, FAKE_CLI, styled
from helpers.homes import loud, noise
from paths import HELPERS

NOT_LOGGED_IN = {"stderr": CLAUDE_SAID + "\n", "exit": 1}
UNKNOWN_TOOL = styled("claude", json.dumps({"tool_calls": [{"name": "nope", "arguments": {}}]}))
QUOTA = (
    "quota: claude limit reached (reset time unknown):"
    " API Error: Request rejected (429) · scripted quota: usage limit reached"
)
MALFORMED = 'cli: malformed reply after {} launches: tool_calls[0] calls unknown tool "nope" (tools: add)'
TOOLS = "def add(a: int, b: int) -> int:\n    return a + b\n"
CLAUDE = ["--style", "claude", "--command", str(FAKE_CLI), "--model", "sonnet", "--transport", "cli"]


def _fake(folder: Path, *replies: dict[str, object]) -> dict[str, str]:
    """A fake CLI folder of its own, with its replies: the environment that points at it."""
    folder.mkdir(parents=True)
    (folder / "script.json").write_text(json.dumps(list(replies)))
    return {"FAKE_CLI_DIR": str(folder)}


def _cases(stderr: str) -> dict[str, tuple[int, list[str]]]:
    """Each case's exit status and stderr lines, between the driver's markers."""
    found = re.findall(r"^=== (\S+)\n(.*?)^=== \1 exit (\d+)$", stderr, re.MULTILINE | re.DOTALL)
    return {name: (int(code), lines.splitlines()) for name, lines, code in found}


@pytest.mark.slow
def test_the_command_says_each_expected_failure_in_one_line(tmp_path, session_id):
    tools = tmp_path / "sums.py"
    tools.write_text(TOOLS)
    budget = tmp_path / "budget.json"
    budget.write_text(
        json.dumps([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}], "usage": {"cost_usd": 0.01}}] * 5)
    )
    add = ["--tools", f"{tools}:add"]
    cases = [
        ("auth", _fake(tmp_path / "auth", NOT_LOGGED_IN), ["run", "hi", *CLAUDE]),
        ("quota", _fake(tmp_path / "quota", {"stdout": CLAUDE_SPENT, "exit": 1}), ["run", "hi", *CLAUDE]),
        ("timeout", _fake(tmp_path / "timeout", {"sleep": 30}), ["run", "hi", *CLAUDE, "--timeout", "0.5"]),
        ("malformed", _fake(tmp_path / "malformed", *[UNKNOWN_TOOL] * 3), ["run", "hi", *CLAUDE, *add]),
        ("budget", {}, ["run", "go", *add, "--script", str(budget), "--max-cost-usd", "0.02", "--session", session_id]),
        ("max-turns", {}, ["run", 'call add {"a": 1, "b": 2}', *add, "--max-turns", "1"]),
        ("missing", {}, ["run", "hi", *CLAUDE[:2], "--command", str(tmp_path / "no-claude"), "--model", "sonnet"]),
        ("no-decision", {}, ["answer", session_id]),
        ("debug", _fake(tmp_path / "debug", NOT_LOGGED_IN), ["--debug", "run", "hi", *CLAUDE]),
    ]
    driven = tmp_path / "cases.json"
    driven.write_text(json.dumps(cases))
    done = subprocess.run(
        [sys.executable, str(HELPERS / "failing_commands.py"), str(driven)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ran = _cases(done.stderr)
    assert list(ran) == [name for name, _, _ in cases], done.stderr[-3000:]
    expected = {
        "auth": (1, f"nexusflow: error: {CLAUDE_PINNED}"),
        "quota": (1, f"nexusflow: error: {QUOTA}"),
        "timeout": (1, "nexusflow: error: cli: timed out after 500ms"),
        "malformed": (1, f"nexusflow: error: {MALFORMED.format(3)}"),
        "budget": (1, f"nexusflow: error: budget: session {session_id} spent $0.02 of $0.02 (max_cost_usd)"),
        "max-turns": (1, "nexusflow: error: max turns exceeded: no final answer after 1 turns"),
        "missing": (2, f"nexusflow: --command: cli: command not found: {tmp_path / 'no-claude'}"),
        "no-decision": (2, "nexusflow: answer needs a decision: pass --approve or --deny"),
    }
    for name, (code, line) in expected.items():
        status, lines = ran[name]
        said = line.split(": ", 2)[-1] if "error: " in line else line.removeprefix("nexusflow: ")
        assert status == code and noise("\n".join(lines)) == [], (name, lines)
        assert [text for text in lines if said in text] == [line], (name, lines)
    status, lines = ran["debug"]
    shown = "\n".join(lines)
    assert status == 1 and f"nexusflow: error: {CLAUDE_PINNED}" in lines
    assert "Traceback (most recent call last):" in shown and "| ERROR   | Task run 'turn-0' - Task run failed" in shown


@pytest.mark.slow
@pytest.mark.anyio
async def test_python_gives_each_expected_failure_to_its_caller_and_says_nothing_more(tmp_path):
    for case in ("run-sync", "own-flow", "job"):
        _fake(tmp_path / case, NOT_LOGGED_IN)
    _fake(tmp_path / "quota", {"stdout": CLAUDE_SPENT, "exit": 1})
    _fake(tmp_path / "timeout", {"sleep": 30})
    _fake(tmp_path / "malformed", UNKNOWN_TOOL)
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    (tmp_path / "acp").mkdir()
    ScriptedAgent(tmp_path / "acp").script([], new_error={"error": "Authentication required", "code": -32000})
    done = subprocess.run(
        [sys.executable, str(HELPERS / "failing_runs.py"), str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = {case["case"]: case for case in map(json.loads, done.stdout.splitlines())}
    errors = {case: said[case]["error"] for case in said}
    busy = errors.pop("busy")
    assert re.fullmatch(r'session: "busy-\w+" is already running \(flow run [0-9a-f-]{36}\)', busy), busy
    assert errors == {
        "run-sync": CLAUDE_PINNED,
        "quota": QUOTA,
        "timeout": "cli: timed out after 500ms",
        "malformed": 'cli: malformed reply after 1 launches: tool_calls[0] calls unknown tool "nope" (tools: add)',
        "missing": f"cli: command not found: {tmp_path / 'no-such-claude'}",
        "permission": f"cli: command not found: {tmp_path / 'not-executable'}",
        "acp": "auth: scripted is not logged in: acp: session/new failed: Authentication required (-32000);"
        " run scripted's login command as the user the job runs as",
        "budget": f"budget: session {said['budget']['session_id']} spent $0.01 of $0.01 (max_cost_usd)",
        "max-turns": "max turns exceeded: no final answer after 1 turns",
        "own-flow": CLAUDE_PINNED,
        "job": f"Flow run encountered an exception: NexusflowError: {CLAUDE_PINNED}",
    }
    assert all(case["status"] == "failed" for case in said.values())
    assert noise(done.stderr) == [], loud(done.stderr)
    pinned = [
        error.removeprefix("Flow run encountered an exception: NexusflowError: ") for error in [*errors.values(), busy]
    ]
    for error in pinned:
        assert [line for line in done.stderr.splitlines() if error in line] == [], "the caller has it; no console line"

    ids = [UUID(case["flow_run_id"]) for case in said.values()]
    async with get_client() as client:
        for case in said.values():
            run = await client.read_flow_run(UUID(case["flow_run_id"]))
            assert run.state is not None and run.state.is_failed() and run.state.message == case["error"], case
        logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids)))
    noisy = [(log.level, log.message[:300]) for log in logs if log.level >= logging.ERROR or "Traceback" in log.message]
    assert noisy == [], "the UI's logs hold one line a failure, without traceback"
    failed = [log.message for log in logs if log.message.startswith("run failed: ")]
    assert sorted(failed) == sorted(f"run failed: {error}" for error in pinned), "and the UI's logs say it once"


def _engine_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name in ("prefect.task_runs", "prefect.flow_runs")]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_bug_keeps_its_traceback_and_an_expected_failure_reaches_no_console(caplog, monkeypatch, session_id):
    def broken(request: object) -> str:
        raise ZeroDivisionError("division by zero")

    caplog.set_level(logging.INFO)
    bug = await create_in_process_client(broken).run("hi", session_id=f"{session_id}-bug")
    assert bug.error == "model: generate raised ZeroDivisionError: division by zero"
    loud = [record for record in _engine_records(caplog) if record.levelno >= logging.ERROR]
    assert any(record.exc_info for record in loud if record.getMessage().startswith("Task run failed with exception"))
    assert any(record.exc_info for record in loud if record.getMessage().startswith("run failed: model: generate"))

    caplog.clear()
    spent = await create_in_process_client(lambda request: "hi", max_turns=1, output_type=int).run(
        "hi", session_id=f"{session_id}-spent"
    )
    assert spent.status == "failed" and spent.error is not None
    assert [record for record in _engine_records(caplog) if spent.error in record.getMessage()] == []

    caplog.clear()
    monkeypatch.setenv("NEXUSFLOW_DEBUG", "1")
    again = await create_in_process_client(lambda request: "hi", max_turns=1, output_type=int).run(
        "hi", session_id=f"{session_id}-debug"
    )
    assert again.error == spent.error
    said = [record for record in _engine_records(caplog) if spent.error in record.getMessage()]
    assert [record.levelno for record in said] == [logging.ERROR, logging.ERROR], "run failed, then Finished"
