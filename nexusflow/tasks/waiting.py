"""A suspension and its wait, each a task run (``suspend-{n}-{tool}``, ``wait-{n}-{tool}``)
persisted under the run's session, so a resumed run replays them and asks nobody twice."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prefect import task

from ..messages import Answer, Request
from .keys import POSITIONAL_KEY
from .stored import note_unstored


@task(
    name="suspension",
    task_run_name="suspend-{step}-{request.tool}",
    persist_result=True,
    result_serializer="json",
    cache_policy=POSITIONAL_KEY,
)
async def suspension(session_id: str, step: int, index: int, key: str, request: Request) -> Request:
    """Records what was asked; its task run is where a person sees the request."""
    return request


@task(
    name="wait",
    task_run_name="wait-{step}-{request.tool}",
    persist_result=True,
    result_serializer="json",
    cache_policy=POSITIONAL_KEY,
)
async def wait(
    session_id: str, step: int, index: int, key: str, request: Request, resolve: Callable[[Request], Awaitable[Answer]]
) -> Answer:
    answer = await resolve(request)
    if not isinstance(answer, Answer):
        raise TypeError(f"wait_for returned {type(answer).__name__}, not an Answer")
    return answer


suspension.on_rollback(note_unstored)
wait.on_rollback(note_unstored)
