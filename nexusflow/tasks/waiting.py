"""A suspension and its wait, each a task run (``suspend-{n}-{tool}``, ``wait-{n}-{tool}``)
persisted under the run's session, so a resumed run replays them and asks nobody twice."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from prefect import task
from prefect.context import TaskRunContext

from ..messages import Answer, Request
from .keys import step_key


def _key(kind: str) -> Callable[[TaskRunContext, dict[str, Any]], str]:
    def key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
        request: Request = parameters["request"]
        return step_key(
            parameters["session_id"], parameters["step"], kind, parameters["index"], request.model_dump(mode="json")
        )

    return key


def wait_key(session_id: str, step: int, index: int, request: Request) -> str:
    """Where a wait's answer is stored, to tell whether a run has been answered already."""
    return step_key(session_id, step, "wait", index, request.model_dump(mode="json"))


@task(
    name="suspension",
    task_run_name="suspend-{step}-{request.tool}",
    persist_result=True,
    result_serializer="json",
    cache_key_fn=_key("suspend"),
)
async def suspension(session_id: str, step: int, index: int, request: Request) -> Request:
    """Records what was asked; its task run is where a person sees the request."""
    return request


@task(
    name="wait",
    task_run_name="wait-{step}-{request.tool}",
    persist_result=True,
    result_serializer="json",
    cache_key_fn=_key("wait"),
)
async def wait(
    session_id: str, step: int, index: int, request: Request, resolve: Callable[[Request], Awaitable[Answer]]
) -> Answer:
    answer = await resolve(request)
    if not isinstance(answer, Answer):
        raise TypeError(f"wait_for returned {type(answer).__name__}, not an Answer")
    return answer
