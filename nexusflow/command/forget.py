"""``nexusflow forget``."""

from __future__ import annotations

import sys

from .._prefect.server import use_server
from ..ops.sessions import Forgotten, forget_session
from ._shared import checked_session_id, count


async def forget(session_ids: list[str], /) -> int:
    """Delete sessions: their records (steps, inputs, what they wait for, the invocation),
    their conversation, a crashed run's left-over lock, and the sessions nested in them.

    Parameters
    ----------
    session_ids
        The sessions to forget; one that runs is refused.
    """
    use_server()
    for session_id in session_ids:
        report_forgotten(await forget_session(checked_session_id(session_id)), session_id)
    return 0


def report_forgotten(forgotten: list[Forgotten], asked: str) -> None:
    if not forgotten:
        print(f"nexusflow: nothing of session {asked} was found", file=sys.stderr)
    for one in forgotten:
        also = [what for what, removed in (("its conversation", one.conversation), ("its lock", one.lock)) if removed]
        also += [count(one.artifacts, "artifact")] if one.artifacts else []
        also += [count(one.logs, "background log")] if one.logs else []
        print(f"forgot {one.session_id}: {count(one.records, 'record')}{''.join(', ' + a for a in also)}")
