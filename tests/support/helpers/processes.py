"""What a test finds among the machine's processes."""

from __future__ import annotations

from pathlib import Path


def running_with(entry: str) -> list[str]:
    """The command lines of the processes whose environment holds ``entry``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if entry.encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(proc.name))
    return found
