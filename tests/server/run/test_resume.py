"""Crash and resume across processes: no model turn is paid twice, no finished tool runs twice."""

import os
import subprocess
import sys

import pytest

from nexusflow import RunResult

from paths import HELPERS


def run_child(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HELPERS / "crash_run.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )


def lines(path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.slow
def test_a_killed_run_resumes_without_repeating_finished_steps(tmp_path, session_id):
    crashed = run_child(session_id, str(tmp_path))
    assert crashed.returncode == 17, crashed.stderr[-3000:]
    assert lines(tmp_path / "crashes") == ["ops"]
    assert lines(tmp_path / "charges") == ["1", "100"]
    assert lines(tmp_path / "model_turns") == ["0", "1"]

    resumed = run_child(session_id, str(tmp_path), "--no-crash")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = RunResult.model_validate_json(resumed.stdout.strip().splitlines()[-1])

    assert result.status == "completed"
    assert result.text == "done: charged 1, charged 100, notified ops"
    assert lines(tmp_path / "model_turns") == ["0", "1", "2"], "each model turn is paid once over both processes"
    assert lines(tmp_path / "charges") == ["1", "100"], "finished tool calls never run again"
    assert lines(tmp_path / "notifications") == ["ops"]
    assert result.metrics.replayed_turns == 2
    assert result.metrics.replayed_tool_calls == 2
