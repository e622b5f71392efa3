"""A suspension and its wait, each a task run (``suspend-{n}-{tool}``, ``wait-{n}-{tool}``)
persisted under the run's session, so a resumed run replays them and asks nobody twice.
The wait's state names the decision: ``Approved``, ``Declined`` or ``Expired``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prefect import get_run_logger, task
from prefect.client.schemas.objects import State
from prefect.states import Completed

from .._prefect.storage import synced
from ..messages import Answer, Request
from .errors import wait_for_returned
from .keys import POSITIONAL_KEY
from .shown import shown
from .stored import note_unstored


@task(
    name="suspension",
    task_run_name="{run_name}",
    persist_result=True,
    result_serializer="json",
    cache_policy=POSITIONAL_KEY,
)
async def suspension(session_id: str, step: int, index: int, key: str, run_name: str, request: Request) -> Request:
    """Records what was asked; its task run is where a person sees the request."""
    await synced(session_id)
    get_run_logger().info("request %s (%s): %s", request.id, request.kind, shown(request.prompt))
    return request


@task(
    name="wait",
    task_run_name="{run_name}",
    persist_result=True,
    result_serializer="json",
    cache_policy=POSITIONAL_KEY,
)
async def wait(
    session_id: str,
    step: int,
    index: int,
    key: str,
    run_name: str,
    request: Request,
    resolve: Callable[[Request], Awaitable[Answer]],
) -> State[Answer]:
    await synced(session_id)
    answer = await resolve(request)
    if not isinstance(answer, Answer):
        raise wait_for_returned(answer)
    decision = "Approved" if answer.ok else "Expired" if answer.reason == "expired" else "Declined"
    return Completed(name=decision, message=shown(answer.reason) if answer.reason else None, data=answer)


suspension.on_rollback(note_unstored)
wait.on_rollback(note_unstored)
