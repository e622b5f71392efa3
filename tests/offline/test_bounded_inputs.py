"""The bounds that need no run and no server (issue 41): the run's bounds are options and
settings; a duration out of range, given to the command or in a ``NEXUSFLOW_*`` variable, is
a usage error; a session id with a newline is refused. What passing each bound does to a run:
tests/server/run/test_bounds.py."""

from __future__ import annotations

import pytest

from nexusflow import SessionIdError, create_in_process_client
from nexusflow.config.settings import NexusflowSettings

from helpers.calling_model import Calls
from helpers.command import nexusflow_here


def test_the_bounds_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: no such options (on ad9173b: ``AttributeError``, no ``max_tool_calls``)."""
    defaults = create_in_process_client(Calls([])).options
    assert (
        defaults.max_tool_calls,
        defaults.max_parallel_tool_calls,
        defaults.max_tool_result,
        defaults.max_argument_depth,
    ) == (64, 16, 2**20, 64)
    monkeypatch.setenv("NEXUSFLOW_MAX_TOOL_CALLS", "3")
    monkeypatch.setenv("NEXUSFLOW_MAX_PARALLEL_TOOL_CALLS", "2")
    monkeypatch.setenv("NEXUSFLOW_MAX_TOOL_RESULT", "1000")
    monkeypatch.setenv("NEXUSFLOW_MAX_ARGUMENT_DEPTH", "8")
    options = create_in_process_client(Calls([])).options
    assert (options.max_tool_calls, options.max_parallel_tool_calls) == (3, 2)
    assert (options.max_tool_result, options.max_argument_depth) == (1000, 8)
    assert create_in_process_client(Calls([]), max_tool_calls=9).options.max_tool_calls == 9
    assert NexusflowSettings().max_tool_result == 1000


@pytest.mark.parametrize(
    "args",
    [
        ["prune", "--older-than", "99999999999w"],
        ["sessions", "--older-than", "1" + "0" * 400 + "s"],
        ["prune", "--older-than", "36501d"],
        ["run", "hi", "--timeout", "inf"],
        ["run", "hi", "--timeout", "nan"],
    ],
)
def test_a_duration_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    """Before: ``OverflowError`` tracebacks (on ad9173b ``main`` raised it for the first two;
    the others were taken and went on to the run)."""
    ran = nexusflow_here(capsys, *args)
    assert ran.returncode == 2, ran.stderr
    (line,) = ran.stderr.splitlines()
    assert line.startswith("nexusflow: ") and ("at most" in line or "finite" in line), line


@pytest.mark.parametrize("variable", ["NEXUSFLOW_TIMEOUT", "NEXUSFLOW_WAIT_TIMEOUT", "NEXUSFLOW_MAX_QUOTA_WAIT"])
def test_a_duration_setting_out_of_range_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """Before: ``inf`` was taken (on ad9173b the command went on to the run, exit 1)."""
    monkeypatch.setenv(variable, "inf")
    ran = nexusflow_here(capsys, "run", "hi")
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.splitlines() == [f"nexusflow: {variable}: input should be a finite number, not 'inf' (str)"]


@pytest.mark.parametrize("bad", ["job\n", "job\r\n", "\njob", "a" * 128 + "\n"])
def test_a_session_id_with_a_newline_is_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``job\\n`` was accepted (``$`` matches before a final newline; on ad9173b
    ``check_session_id`` returned it)."""
    from nexusflow.config._checks import check_session_id

    with pytest.raises(SessionIdError):
        check_session_id(bad)
    ran = nexusflow_here(capsys, "forget", bad)
    assert ran.returncode == 2 and "invalid session id" in ran.stderr
