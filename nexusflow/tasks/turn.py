"""One model turn as a Prefect task (``turn-{n}``), replayed from storage once finished."""

from __future__ import annotations

import time

from prefect import task
from pydantic import BaseModel

from .._runtime import current_active, current_step
from ..errors import ModelError
from ..hooks import call_hook, hook_returned
from ..messages import ModelReply, ModelRequest
from .keys import given_key
from .stored import note_unstored


class TurnRecord(BaseModel):
    """What is persisted for a turn: the reply, and what it cost when it really ran."""

    reply: ModelReply
    seconds: float


async def produce_turn(request: ModelRequest) -> TurnRecord:
    """The turn itself, without Prefect: hooks around the transport's ``generate``."""
    run = current_active()
    options = run.options
    started = time.perf_counter()
    if options.before_llm is not None:
        replaced = await call_hook("before_llm", options.before_llm, request)
        if replaced is not None:
            if not isinstance(replaced, ModelRequest):
                raise hook_returned("before_llm", replaced)
            request = replaced
    reply = await run.transport.generate(request)
    if options.after_llm is not None:
        replaced = await call_hook("after_llm", options.after_llm, request, reply)
        if replaced is not None:
            if not isinstance(replaced, ModelReply):
                raise hook_returned("after_llm", replaced)
            reply = replaced
    if reply.content is None and not reply.tool_calls:
        raise ModelError("model: empty reply (no content and no tool calls)")
    return TurnRecord(reply=reply, seconds=time.perf_counter() - started)


@task(
    name="model-turn",
    task_run_name="turn-{step}",
    persist_result=True,
    result_serializer="json",
    cache_key_fn=given_key,
)
async def model_turn(session_id: str, step: int, key: str, request: ModelRequest) -> TurnRecord:
    token = current_step.set(step)
    try:
        return await produce_turn(request)
    finally:
        current_step.reset(token)


model_turn.on_rollback(note_unstored)
