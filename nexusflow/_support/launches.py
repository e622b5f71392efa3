"""Nothing behind after kill -9: the processes a run launched (a one-shot CLI, an ACP agent)
and their scratch folders, noted while they run, reaped once the run's process is gone.

A process killed with SIGKILL cannot clean up: its CLI goes on with its turn (spending the
subscription's tokens) and its scratch folder stays. So each launch is noted, while it runs,
in a file of this user's folder under the system's temporary folder (``nexusflow-launches-
<uid>``, mode 0700, refused when it is not this user's own, removed when empty): the launching process, the
launched one, the tag its descendants carry (``oneshot.process``) and its scratch folder.
The note is removed when the launch ends. A process that starts its first run on this machine
reaps the notes whose launcher is gone for certain (``_liveness``): it kills what of the launch
still runs (its group while its leader is the same process, every process carrying its tag)
and removes its scratch folder. ``nexusflow prune`` reaps too. A launcher on another machine
or in another PID namespace is never taken for gone."""

from __future__ import annotations

import errno
import logging
import os
import secrets
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ValidationError

from .liveness import ProcessMark, gone, process_mark, this_process

logger = logging.getLogger("nexusflow.launches")

KILL_ROUNDS = 20
"""Scans of /proc per clean-up: a descendant may fork while we kill its parent."""


def kill_group(pid: int) -> None:
    """SIGKILL a whole process group; one that is already gone is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tagged(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return needle in b"\0" + handle.read()
    except OSError:  # gone, or another user's
        return False


def _kill_if_tagged(pid: int, needle: bytes) -> bool:
    """Kill ``pid`` if its environment carries the tag. The check is repeated through a
    pidfd, so a pid reused since the first read is never signalled."""
    if not _tagged(pid, needle):
        return False
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            return False
        try:  # a kernel before 5.3 has no pidfd: a pid reused within microseconds could be hit
            os.kill(pid, signal.SIGKILL)
            return True
        except OSError:
            return False
    try:
        if not _tagged(pid, needle):
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(pidfd)


def kill_tagged(tag: str) -> None:
    """SIGKILL every process whose environment carries ``tag``, until a scan finds none."""
    needle = f"\0{tag}=".encode()
    for _ in range(KILL_ROUNDS):
        try:
            pids = [int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()]
        except FileNotFoundError:  # no /proc (not Linux): the group kill is all there is
            return
        killed = False
        for pid in pids:
            killed |= _kill_if_tagged(pid, needle)
        if not killed:
            return


SCRATCH_PREFIXES = ("nexusflow-cli-", "nexusflow-acp-")
"""The scratch folders a reap may remove: nexusflow's own, in the temporary folder."""


class Launch(BaseModel):
    launcher: ProcessMark
    process: ProcessMark
    tag: str | None = None
    scratch: str | None = None


def _folder(*, make: bool = True) -> Path | None:
    """This user's folder of notes, made if missing; None when it is not safely this user's
    (another user's, a symlink, open to others): then nothing is noted and nothing reaped."""
    folder = Path(tempfile.gettempdir()) / f"nexusflow-launches-{os.getuid()}"
    try:
        if make:
            folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return folder


@contextmanager
def noted(pid: int, *, tag: str | None = None, scratch: str | None = None) -> Iterator[None]:
    """Note the launch ``pid`` for the body. Where the machine cannot tell a process's mark
    (no ``/proc``), nothing is noted."""
    note = _note(pid, tag=tag, scratch=scratch)
    try:
        yield
    finally:
        forget_launch(note)


def _note(pid: int, *, tag: str | None, scratch: str | None) -> Path | None:
    launcher, process = this_process(), process_mark(pid)
    if launcher is None or process is None:
        return None
    text = Launch(launcher=launcher, process=process, tag=tag, scratch=scratch).model_dump_json()
    for _ in range(2):  # again when another process removed the folder, empty, as it was made
        folder = _folder()
        if folder is None:
            return None
        note = folder / f"{launcher.pid}-{pid}-{secrets.token_hex(4)}.json"
        partial = note.with_suffix(".part")
        try:
            partial.write_text(text)
            partial.rename(note)
        except FileNotFoundError:
            continue
        except OSError as exc:
            partial.unlink(missing_ok=True)
            logger.debug("could not note launch %d: %s", pid, exc)
            return None
        return note
    return None


def note_launch(pid: int, *, tag: str | None = None, scratch: str | None = None) -> Path | None:
    """Note a launch that outlives a ``with`` block (an ACP agent); remove the note with
    ``forget_launch`` when it ends."""
    return _note(pid, tag=tag, scratch=scratch)


def forget_launch(note: Path | None) -> None:
    """Remove the note, and the folder once it is empty: the system's temporary folder is
    left as it was."""
    if note is None:
        return
    note.unlink(missing_ok=True)
    try:
        note.parent.rmdir()
    except OSError:
        pass  # another launch's note is in it


def reap() -> int:
    """Kill what is left of the launches of processes that are gone, remove their scratch
    folders and notes; how many launches were reaped."""
    folder = _folder(make=False)
    if folder is None:
        return 0
    reaped = 0
    for note in folder.glob("*.json"):
        try:
            launch = Launch.model_validate_json(note.read_bytes())
        except (OSError, ValidationError):
            forget_launch(note)  # a note cut short by a kill: nothing to act on
            continue
        if not gone(launch.launcher):
            continue
        if not gone(launch.process):  # its leader is still the process launched: its group is the launch's
            kill_group(launch.process.pid)
        if launch.tag is not None:
            kill_tagged(launch.tag)
        _remove_scratch(launch.scratch)
        forget_launch(note)
        reaped += 1
    if reaped:
        logger.info("reaped what %d launch(es) of killed runs left behind", reaped)
    return reaped


def _remove_scratch(scratch: str | None) -> None:
    if scratch is None:
        return
    path = Path(scratch)
    if path.parent == Path(tempfile.gettempdir()) and path.name.startswith(SCRATCH_PREFIXES):
        shutil.rmtree(path, ignore_errors=True)
