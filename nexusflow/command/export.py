"""``nexusflow export``."""

from __future__ import annotations

import sys
from pathlib import Path

from .._prefect.server import use_server
from ..testing.export import export_cassette
from ._shared import checked_session_id, count


async def export(session_id: str, /, *, cassette: Path, style: str | None = None) -> int:
    """Write a cassette from a session's recorded steps (no live run, no CLI needed), so a
    run that went wrong is replayed in a test, offline, the same way.

    Parameters
    ----------
    session_id
        The session to export: completed, failed, waiting or crashed, not running.
    cassette
        The cassette file to write (JSON); replay it with ``Cassette(FILE)`` on a CLI client.
    style
        An ACP session's client style, when it is not a built-in one.
    """
    chosen = checked_session_id(session_id)
    use_server()
    written = await export_cassette(chosen, cassette, style=style)
    prompts = [
        e for s in written.acp for e in s.events if e.client is not None and e.client.get("method") == "session/prompt"
    ]
    turns = count(len(written.launches) + len(prompts), "turn")
    acp = f" (an ACP session of style {written.acp[0].style})" if written.acp else ""
    print(f"nexusflow: wrote {turns} of session {chosen} to {cassette}{acp}", file=sys.stderr)
    return 0
