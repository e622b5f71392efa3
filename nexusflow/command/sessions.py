"""``nexusflow sessions``."""

from __future__ import annotations

from typing import Annotated

from cyclopts import Parameter
from pydantic import TypeAdapter

from .._prefect.server import use_server
from ..ops.sessions import SessionInfo, duration, list_sessions

_SESSIONS = TypeAdapter(list[SessionInfo])


async def sessions(
    *,
    state: Annotated[list[str] | None, Parameter(consume_multiple=True)] = None,
    older_than: str | None = None,
    as_json: Annotated[bool, Parameter(name="--json")] = False,
) -> int:
    """The sessions in the result storage, the most recently active first.

    Parameters
    ----------
    state
        Only sessions in these states: running, waiting, completed, failed, crashed, cancelled
        (comma-separated or repeated).
    older_than
        Only sessions idle for longer than this: 7d, 12h, 30m, 90s.
    as_json
        One JSON list on stdout: session_id, state, flow_run_id, updated (ISO 8601), turns,
        tool_calls, waits_for, tool, error, cost_usd, tokens and last_step (a running or
        crashed session's last stored step) (null where nothing reported them).
    """
    idle = duration(older_than) if older_than is not None else None
    use_server()
    found = await list_sessions(state=state or (), older_than=idle)
    if as_json:
        print(_SESSIONS.dump_json(found).decode())
        return 0
    print(
        f"{'session':<40} {'state':<10} {'updated':<20} {'turns':>5} {'cost':>10}  {'flow run':<36}  waits for / error"
    )
    for info in found:
        stored = f"last stored step {info.last_step}" if info.state == "crashed" and info.last_step else ""
        said = info.waits_for or info.error or stored
        updated = info.updated.astimezone().strftime("%Y-%m-%d %H:%M:%S")
        cost = f"${info.cost_usd:.4g}" if info.cost_usd is not None else "?"
        print(
            f"{info.session_id:<40} {info.state:<10} {updated:<20} {info.turns:>5} {cost:>10}"
            f"  {info.flow_run_id or '':<36}  {said[:80]}"
        )
    return 0
