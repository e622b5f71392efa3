"""A value a transport must find again when a session resumes (an ACP agent's session id),
persisted under the run's session like every step."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prefect import task

from .._prefect.storage import synced
from .keys import POSITIONAL_KEY
from .stored import note_unstored


@task(
    name="agent-session",
    task_run_name="{kind}",
    persist_result=True,
    result_serializer="json",
    cache_policy=POSITIONAL_KEY,
)
async def remembered(session_id: str, kind: str, key: str, produce: Callable[[], Awaitable[str]]) -> str:
    await synced(session_id)
    return await produce()


remembered.on_rollback(note_unstored)
