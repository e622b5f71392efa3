"""``nexusflow prune``."""

from __future__ import annotations

import sys
from typing import Annotated

from cyclopts import Parameter

from .._prefect.server import use_server
from ..ops.sessions import duration, prune_sessions
from ._shared import count
from .forget import report_forgotten


async def prune(*, older_than: str, state: Annotated[list[str] | None, Parameter(consume_multiple=True)] = None) -> int:
    """Forget every session idle for longer than a duration.

    Parameters
    ----------
    older_than
        How long a session has been idle: 7d, 12h, 30m, 90s, 0s.
    state
        The states to prune (default: completed, failed, crashed, cancelled; a waiting session stays
        unless named; a running one is never pruned).
    """
    idle = duration(older_than)
    use_server()
    pruned = await prune_sessions(older_than=idle, state=state or ())
    for forgotten in pruned:
        report_forgotten([forgotten], forgotten.session_id)
    print(f"nexusflow: pruned {count(len(pruned), 'session')}", file=sys.stderr)
    return 0
