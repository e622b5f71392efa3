"""A value a transport must find again when a session resumes (an ACP agent's session id),
persisted under the run's session like every step."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from prefect import task
from prefect.context import TaskRunContext

from .keys import step_key
from .stored import note_unstored


def _session_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    return step_key(parameters["session_id"], 0, parameters["kind"], 0, parameters["inputs"])


@task(
    name="agent-session",
    task_run_name="{kind}",
    persist_result=True,
    result_serializer="json",
    cache_key_fn=_session_key,
)
async def remembered(session_id: str, kind: str, inputs: dict[str, Any], produce: Callable[[], Awaitable[str]]) -> str:
    return await produce()


remembered.on_rollback(note_unstored)
