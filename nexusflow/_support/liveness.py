"""Whether a lock's holder lives, without trusting any one machine's wall clock.

Two facts decide it. A holder on this machine is dead for certain once its process is gone:
its beat names the machine (the boot and the PID namespace, which two containers on one host
do not share) and the process (its PID and its start time, so a reused PID is another
process). A holder anywhere else is judged by the age of its last beat on one clock, the
Prefect server's: the holder stamps each beat with the server's time (the time at which the
server created its lock, plus its own monotonic time since), and a reader reads the server's
time from the ``Date`` of an answer it gets anyway. Two machines' clocks may disagree by
minutes; neither enters the comparison.
"""

from __future__ import annotations

import os
import socket
from email.utils import parsedate_to_datetime
from functools import cache
from pathlib import Path

import httpx
from pydantic import BaseModel


class ProcessMark(BaseModel):
    """A process as its beat names it: where it runs and which process it is."""

    machine: str
    pid: int
    started: int
    """Its start time in clock ticks after the machine's boot (``/proc/<pid>/stat``)."""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


@cache
def _machine() -> str | None:
    """This machine and PID namespace; None where ``/proc`` does not tell (not Linux)."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return None if boot is None else f"{socket.gethostname()}/{boot.strip()}/{namespace}"


def _started(pid: int) -> int | None:
    """The process's start time, or None when there is no such living process (a zombie,
    killed and not yet reaped by its parent, is none)."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def this_process() -> ProcessMark | None:
    return process_mark(os.getpid())


def process_mark(pid: int) -> ProcessMark | None:
    """The mark of a living process of this machine; None where ``/proc`` cannot tell."""
    machine = _machine()
    started = _started(pid) if machine is not None else None
    if machine is None or started is None:
        return None
    return ProcessMark(machine=machine, pid=pid, started=started)


def gone(mark: ProcessMark | None) -> bool:
    """Whether the process ``mark`` names is dead for certain: it ran on this machine and is
    no longer there. A process elsewhere, or unknown, is never taken for dead here."""
    if mark is None or mark.machine != _machine():
        return False
    return _started(mark.pid) != mark.started


def server_time(response: httpx.Response) -> float | None:
    """The server's time when it answered (its ``Date``, to the second), in epoch seconds."""
    stamp = response.headers.get("date")
    if stamp is None:
        return None
    try:
        return parsedate_to_datetime(stamp).timestamp()
    except (TypeError, ValueError):
        return None
