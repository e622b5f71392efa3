"""Crash injection for your own agent programs: ``crash_at_every_step`` runs a script once
without a kill, then once per step boundary killed there (SIGKILL to its whole process group)
and resumed in a new process, and checks what nexusflow promises: every step stored before
the kill replays, no tool call runs more often than without the kill (but for a call that was
in flight), and the resumed run prints what the uninterrupted one printed. It is what
nexusflow's own durability tests do, in one call.

What it sees comes from a hook in each child process (``_crash_hook``): the step records
nexusflow stores and the tool calls its toolkit starts. A step record is stored when a turn,
a tool call, a suspension or a wait has finished, so "after step k" is also "before step
k + 1". A tool call in flight at the kill (started, its record not yet stored) may run once
more: that is the at-least-once case of the README's Guarantees, reported and allowed. A side
effect outside a tool is beyond what the helper sees, but for what the program prints.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from ..config.errors import argument_wrong
from ..errors import CrashResumeError
from .errors import (
    crash_boundary,
    crash_ended,
    crash_no_steps,
    crash_not_killed,
    crash_output_differs,
    crash_ran_again,
    crash_resume_failed,
    crash_tools_again,
    crash_uninterrupted_failed,
)

SESSION = "{session}"
"""In the script's arguments, replaced by a fresh session id for each kill and its resume
(another for the uninterrupted run); in what it prints, put back before the comparison."""

TIMEOUT = 300.0
"""Seconds each process of the program may take."""

NEVER = -1
"""The kill point of a run that is not killed."""

STDERR_SHOWN = 3000
"""How much of a failed process's standard error an error shows (its end)."""


class CrashBoundary(BaseModel):
    """One kill and its resume."""

    killed_after: int
    """How many step records were stored at the kill: 0 is before the first step."""
    where: str
    """``before the first step``, ``after step 2 of 3 (tool-0 call 0)``."""
    resumed: bool = False
    """The resume ended with exit status 0 and printed what the uninterrupted run printed."""
    replayed: list[str] = []
    """The steps stored before the kill that the resume replayed (did not run again)."""
    ran_again: list[str] = []
    """The steps stored before the kill that the resume ran again: a broken guarantee."""
    in_flight_again: list[str] = []
    """Tools whose call was in flight at the kill and ran once more: allowed (at least once)."""
    tools_again: list[str] = []
    """Tools that ran more often than without the kill, beyond those: a broken guarantee."""
    failure: str | None = None
    """Why this boundary failed, or None."""


class CrashReport(BaseModel):
    """What ``crash_at_every_step`` found: the uninterrupted run, and every boundary."""

    program: str
    steps: list[str]
    """The uninterrupted run's steps in the order their records were stored: ``turn-0``,
    ``tool-0 call 0`` (the first call of turn 0), ``turn-1``..."""
    tool_calls: dict[str, int]
    """How often each tool ran in the uninterrupted run."""
    output: str
    """What the uninterrupted run printed (its session id as ``{session}``)."""
    boundaries: list[CrashBoundary]


@dataclass
class _Ran:
    """One process of the program: its exit status, its output and the hook's log."""

    session: str
    """The session id ``{session}`` stood for."""
    code: int | None
    """Its exit status (negative: the signal that ended it), or None if it was stopped."""
    out: str
    err: str
    stored: list[tuple[str, str]]
    """(session, step) of each step record it stored, in order: step as in ``CrashReport.steps``."""
    tools: list[tuple[str, str, str]]
    """(session, step, tool) of each tool call it started, step as a tool call's record names it."""

    def steps(self) -> Counter[str]:
        """Sessions aside: a program that starts a new session at each start runs the same
        steps under another id, and that is a step run again."""
        return Counter(step for _, step in self.stored)

    def printed(self) -> str:
        return self.out.replace(self.session, SESSION)


def crash_at_every_step(
    script: str | os.PathLike[str], *args: str, timeout: float = TIMEOUT, concurrency: int = 1
) -> CrashReport:
    """Run ``python script *args`` once without a kill, then, for each step boundary in turn,
    a new run killed there (its process group SIGKILLed right after its k-th step record is
    stored, or before its first step) and resumed in a new process with the same arguments;
    raise ``CrashResumeError`` naming the first boundary where a guarantee broke.

    The script resumes a session only if it is given the same session id again: pass
    ``"{session}"`` among ``args`` for the helper to put one there (fresh for each kill and
    its resume). Each kill and its resume get a result storage of their own (a temporary
    folder, removed at the end; an object store configured for results is not used), so
    a session id fixed in the script works too. Everything else comes from the environment:
    ``PREFECT_API_URL`` or the embedded default. Every process's group is killed when it
    ends, so nothing it started outlives it.

    ``concurrency`` boundaries run at once (each kill is followed by its own resume; they
    share nothing but the server). A resume waits some seconds for the killed run's lease to
    go stale, so a few at once finish the test several times sooner; each is a process of
    its own (and on the embedded default a server of its own), so keep it to the cores."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise argument_wrong("crash_at_every_step", "concurrency", "an int of 1 or more", concurrency)
    program = " ".join([os.fspath(script), *args])
    with tempfile.TemporaryDirectory(prefix="nexusflow-crash-") as folder:
        runner = _Runner(Path(folder), [os.fspath(script), *args], timeout)
        whole = runner.run("uninterrupted", NEVER)
        if whole.code != 0:
            raise crash_uninterrupted_failed(program, crash_ended(whole.code, timeout), whole.err[-STDERR_SHOWN:])
        if not whole.stored:
            raise crash_no_steps(program)
        report = CrashReport(
            program=program,
            steps=[step for _, step in whole.stored],
            tool_calls=dict(Counter(tool for *_, tool in whole.tools)),
            output=whole.printed(),
            boundaries=[],
        )
        with ThreadPoolExecutor(concurrency, thread_name_prefix="nexusflow-crash") as pool:
            kills = range(len(whole.stored) + 1)
            report.boundaries = list(pool.map(lambda k: runner.boundary(k, whole), kills))
    failed = next((boundary for boundary in report.boundaries if boundary.failure is not None), None)
    if failed is not None and failed.failure is not None:
        raise CrashResumeError(program, failed.where, failed.failure, report)
    return report


@dataclass
class _Runner:
    folder: Path
    command: list[str]
    timeout: float

    def run(self, name: str, kill_after: int, session: str | None = None) -> _Ran:
        """One process of the program, in the result storage of ``name`` (a kill and its
        resume share theirs), killed after ``kill_after`` stored step records."""
        session = session or uuid.uuid4().hex
        place = self.folder / name
        place.mkdir(exist_ok=True)
        log = place / f"log-{kill_after}"
        env = {**os.environ, "PREFECT_LOCAL_STORAGE_PATH": str(place / "storage")}
        env.pop("PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK", None)  # step records are counted as local files
        hook = [sys.executable, "-m", "nexusflow.testing._crash_hook", str(log), str(kill_after)]
        arguments = [argument.replace(SESSION, session) for argument in self.command]
        process = subprocess.Popen(
            [*hook, *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # a group of its own: the kill takes an embedded server with it
        )
        code: int | None
        try:
            out, err = process.communicate(timeout=self.timeout)
            code = process.returncode
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            out, err = process.communicate()
            code = None
        finally:
            _kill_group(process.pid)  # whatever the program left running
        return _Ran(session, code, out, err, *_read_log(log))

    def boundary(self, killed_after: int, whole: _Ran) -> CrashBoundary:
        name = f"killed-after-{killed_after}"
        killed = self.run(name, killed_after)
        stored = [step for _, step in killed.stored]
        step = stored[killed_after - 1] if 0 < killed_after <= len(stored) else None
        where = crash_boundary(killed_after, len(whole.stored), step)
        if killed.code != -signal.SIGKILL or len(stored) != killed_after:
            why = crash_not_killed(crash_ended(killed.code, self.timeout), len(stored))
            return CrashBoundary(killed_after=killed_after, where=where, failure=why)
        resumed = self.run(name, NEVER, killed.session)
        before, after, without = killed.steps(), resumed.steps(), whole.steps()
        again = {step for step in before if before[step] + after[step] > without[step]}
        ran_again = [step for step in stored if step in again]
        in_flight_again, tools_again = _tools_again(killed, resumed, whole)
        same = resumed.printed() == whole.printed()
        failure = None
        if resumed.code != 0:
            failure = crash_resume_failed(crash_ended(resumed.code, self.timeout), resumed.err[-STDERR_SHOWN:])
        elif ran_again:
            failure = crash_ran_again(ran_again)
        elif tools_again:
            failure = crash_tools_again(tools_again)
        elif not same:
            failure = crash_output_differs(whole.printed(), resumed.printed())
        return CrashBoundary(
            killed_after=killed_after,
            where=where,
            resumed=resumed.code == 0 and same,
            replayed=[step for step in stored if step not in again],
            ran_again=ran_again,
            in_flight_again=in_flight_again,
            tools_again=tools_again,
            failure=failure,
        )


def _tools_again(killed: _Ran, resumed: _Ran, whole: _Ran) -> tuple[list[str], list[str]]:
    """The tools that ran more often across the kill and its resume than without the kill:
    those a call in flight at the kill accounts for (allowed), and the rest (not)."""
    in_flight = Counter(tool for session, step, tool in killed.tools if (session, step) not in killed.stored)
    extra = Counter(tool for *_, tool in killed.tools + resumed.tools)
    extra.subtract(Counter(tool for *_, tool in whole.tools))
    allowed = [tool for tool in sorted(extra) if 0 < extra[tool] <= in_flight[tool]]
    broken = [tool for tool in sorted(extra) if extra[tool] > in_flight[tool]]
    return allowed, broken


def _read_log(log: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """The hook's log: each step record stored, as (session, ``turn-0`` or ``tool-0 call 1``),
    and each tool call started, as (session, ``tool-0 call 1``, tool)."""
    stored: list[tuple[str, str]] = []
    tools: list[tuple[str, str, str]] = []
    lines = log.read_text().splitlines() if log.exists() else []
    for line in lines:
        what, session, step, *rest = line.split(" ")
        if what == "stored":
            kind, call = rest
            stored.append((session, f"turn-{step}" if kind == "turn" else f"{kind}-{step} call {call}"))
        else:
            call, tool = rest
            tools.append((session, f"tool-{step} call {call}", tool))
    return stored, tools


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
