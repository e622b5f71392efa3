"""Where a tool call sits in its run, for a tool that starts a run of its own (an agent as a
tool): the nested run's session id derives from it, so resuming the caller resumes the
nested run too. The tool-call task hands it down with the call (``Toolkit.call``); low in
the layers, so the toolkit knows it without knowing the task."""

from __future__ import annotations

from dataclasses import dataclass

from .._support.digest import digest

MAX_SESSION_ID = 128


def child_session_id(parent: str, *parts: int) -> str:
    """``<parent>.<part>...``, shortened with a digest of the parent when that would pass the
    128 characters every accepted session id must fit (so nesting never runs out of room)."""
    suffix = "".join(f".{part}" for part in parts)
    if len(parent) + len(suffix) <= MAX_SESSION_ID:
        return parent + suffix
    return f"{parent[: MAX_SESSION_ID - len(suffix) - 17]}-{digest(parent)}{suffix}"


@dataclass(frozen=True)
class CallPosition:
    """The session, turn and call index of one tool call: unique within a run, and the same
    when a resumed run runs the call again (the call after an approval included)."""

    session_id: str
    step: int
    index: int

    def child_session_id(self) -> str:
        return child_session_id(self.session_id, self.step, self.index)
