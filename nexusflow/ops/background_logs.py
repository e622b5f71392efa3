"""Where ``nexusflow mcp`` keeps the output of the runs it starts in the background: local
files under Prefect's home, one folder a session, which ``forget`` and ``prune`` remove with
the session on the machine that runs them."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
from prefect.settings import get_current_settings

from .._support.digest import digest


def logs_folder(session_id: str) -> Path:
    """``<PREFECT_HOME>/nexusflow/mcp/<session digest>/``: a session id may hold any character."""
    return Path(get_current_settings().home).expanduser() / "nexusflow" / "mcp" / digest(session_id)


async def delete_logs(session_id: str) -> int:
    """The session's background logs deleted; how many there were."""

    def deleted() -> int:
        folder = logs_folder(session_id)
        try:
            count = sum(1 for _ in folder.iterdir())
        except FileNotFoundError:
            return 0
        shutil.rmtree(folder, ignore_errors=True)
        return count

    return await anyio.to_thread.run_sync(deleted)
