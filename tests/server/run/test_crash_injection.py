"""``nexusflow.testing.crash_at_every_step``, the durability tests offered to users: run on
``examples/triage.py`` it kills the script at every step boundary in turn (SIGKILL to its
process group), resumes each in a new process and finds nothing run twice; run on the same
script without a session id of its own (a new session at each start) it fails, naming the
first boundary where a stored step ran again. A call in flight at the kill may run once more
(reported, allowed). None leaves a process or a temporary file. The helper runs three
boundaries at once here (``concurrency``): each resume waits for its killed run's lease to go
stale, and three such waits overlap. They run on this session's server: the helper inherits
the environment, so on the embedded default each of its processes starts a server of its own
(the same check took 106 s there, run once by hand, against 48 s here); where the server
lives changes the take-over, which test_server_places.py covers.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nexusflow.testing import CrashReport, CrashResumeError, CrashTestError, crash_at_every_step

from helpers.processes import running_with
from paths import EXAMPLES, HELPERS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

TRIAGE = str(EXAMPLES / "triage.py")
STEPS = ["turn-0", "tool-0 call 0", "turn-1"]
"""The triage run: a turn that asks for ``open_issues``, that call, the turn with the report."""
MARK = "NEXUSFLOW_TEST_CRASH"
CONCURRENCY = 3
"""Boundaries at once: the slow tier's workers each run one test, on two cores."""


@dataclass
class Leftovers:
    """What the helper's processes and temporary folders would leave behind."""

    mark: str
    temporary: Path

    def check(self) -> None:
        assert running_with(self.mark) == [], "a process the helper started outlived it"
        assert list(self.temporary.iterdir()) == [], "the helper left a temporary file"


@pytest.fixture
def leftovers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Leftovers]:
    """Each process the helper starts inherits a mark in its environment, and its temporary
    folder is made under the test's own."""
    mark = f"{MARK}={uuid.uuid4().hex}"
    monkeypatch.setenv(MARK, mark.split("=", 1)[1])
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    yield Leftovers(mark, temporary)


def test_triage_killed_at_every_step_boundary_resumes_with_nothing_run_twice(leftovers: Leftovers) -> None:
    report = crash_at_every_step(TRIAGE, "--session", "{session}", concurrency=CONCURRENCY)
    assert report.steps == STEPS
    assert report.tool_calls == {"open_issues": 1}
    assert "paged: #42 Login fails on Safari\n" in report.output
    assert [boundary.where for boundary in report.boundaries] == [
        "before the first step",
        "after step 1 of 3 (turn-0)",
        "after step 2 of 3 (tool-0 call 0)",
        "after step 3 of 3 (turn-1)",
    ]
    for killed_after, boundary in enumerate(report.boundaries):
        assert boundary.killed_after == killed_after
        assert boundary.failure is None, boundary.failure
        assert boundary.resumed
        assert boundary.replayed == STEPS[:killed_after], "each step stored before the kill replayed"
        assert boundary.ran_again == boundary.tools_again == boundary.in_flight_again == []
    leftovers.check()


def test_a_call_in_flight_at_the_kill_may_run_once_more(tmp_path: Path, leftovers: Leftovers) -> None:
    """Killed once ``fast``'s record is stored, ``slow`` still running: the resume replays
    ``fast`` and runs ``slow`` again. At least once, as the Guarantees say: reported, not failed."""
    report = crash_at_every_step(HELPERS / "crash_parallel.py", "{session}", str(tmp_path), concurrency=CONCURRENCY)
    assert report.steps == ["turn-0", "tool-0 call 0", "tool-0 call 1", "turn-1"]
    assert report.tool_calls == {"fast": 1, "slow": 1}
    assert [boundary.failure for boundary in report.boundaries] == [None] * 5
    assert [boundary.in_flight_again for boundary in report.boundaries] == [[], [], ["slow"], [], []]
    assert report.boundaries[2].replayed == ["turn-0", "tool-0 call 0"]
    leftovers.check()


def test_a_script_that_starts_a_new_session_at_each_start_fails_it(leftovers: Leftovers) -> None:
    """Without ``--session`` triage runs a new session at each start: its resume runs every
    step again, and the helper says where that first mattered."""
    with pytest.raises(CrashResumeError) as caught:
        crash_at_every_step(TRIAGE, concurrency=CONCURRENCY)
    assert str(caught.value) == (
        f"crash test of {TRIAGE}: killed after step 1 of 3 (turn-0):"
        " the resume ran again what was stored before the kill: turn-0"
    )
    assert caught.value.boundary == "after step 1 of 3 (turn-0)"
    report = caught.value.report
    assert isinstance(report, CrashReport)
    first, *rest = report.boundaries
    assert first.failure is None, "killed before its first step, it had nothing to run again"
    assert [boundary.ran_again for boundary in rest] == [STEPS[:1], STEPS[:2], STEPS]
    assert [boundary.tools_again for boundary in rest] == [[], ["open_issues"], ["open_issues"]]
    assert all(boundary.resumed for boundary in rest), "it printed the same: only the step records tell"
    leftovers.check()


def test_a_script_that_runs_no_agent_cannot_be_crash_tested(tmp_path: Path, leftovers: Leftovers) -> None:
    script = tmp_path / "plain.py"
    script.write_text("print('no agent here')\n")
    with pytest.raises(CrashTestError) as caught:
        crash_at_every_step(script)
    assert str(caught.value) == (
        f"crash test of {script}: the uninterrupted run stored no step record (it runs no agent of nexusflow's)"
    )
    leftovers.check()
