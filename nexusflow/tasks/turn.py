"""One model turn as a Prefect task (``turn-{n}``), replayed from storage once finished."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prefect import task
from prefect.transactions import CommitMode, atransaction
from pydantic import BaseModel

from ..errors import ModelError
from ..events import Emit
from ..hooks import AfterLlm, BeforeLlm, call_hook, hook_returned
from ..messages import ModelReply, ModelRequest, ToolCall
from ..transports import CallOutcome, CallTool, ModelTransport, TurnScope
from .keys import POSITIONAL_KEY
from .stored import note_unstored
from .tool_call import ToolRecord


class TurnRecord(BaseModel):
    """What is persisted for a turn: the reply, and what it cost when it really ran."""

    reply: ModelReply
    seconds: float


@dataclass(frozen=True)
class TurnRuntime:
    """The live objects a turn needs, handed over explicitly (quoted: Prefect neither hashes
    nor walks them). ``run_tool`` is the flow's keyed tool call, for an agent that calls
    our tools itself during the turn (ACP)."""

    transport: ModelTransport
    before_llm: BeforeLlm | None = None
    after_llm: AfterLlm | None = None
    run_tool: Callable[[int, int, ToolCall], Awaitable[tuple[ToolRecord, bool]]] | None = None
    emit: Emit | None = None


async def produce_turn(request: ModelRequest, runtime: TurnRuntime, scope: TurnScope | None = None) -> TurnRecord:
    """The turn itself, without Prefect: hooks around the transport's ``generate``."""
    started = time.perf_counter()
    if runtime.before_llm is not None:
        replaced = await call_hook("before_llm", runtime.before_llm, request)
        if replaced is not None:
            if not isinstance(replaced, ModelRequest):
                raise hook_returned("before_llm", replaced)
            request = replaced
    reply = await runtime.transport.generate(request, scope)
    if runtime.after_llm is not None:
        replaced = await call_hook("after_llm", runtime.after_llm, request, reply)
        if replaced is not None:
            if not isinstance(replaced, ModelReply):
                raise hook_returned("after_llm", replaced)
            reply = replaced
    if reply.content is None and not reply.tool_calls:
        raise ModelError("model: empty reply (no content and no tool calls)")
    return TurnRecord(reply=reply, seconds=time.perf_counter() - started)


def _served_calls(runtime: TurnRuntime, step: int) -> CallTool | None:
    """The agent's own tool calls as task runs nested under this turn's task run, each
    committed at once: if the turn fails later, a finished call must stay finished."""
    run_tool = runtime.run_tool
    if run_tool is None:
        return None
    context = contextvars.copy_context()  # the turn's task run, which the calls nest under

    async def call_tool(index: int, call: ToolCall) -> CallOutcome:
        async def committed() -> tuple[ToolRecord, bool]:
            async with atransaction(commit_mode=CommitMode.EAGER):
                return await run_tool(step, index, call)

        record, replayed = await asyncio.get_running_loop().create_task(committed(), context=context)
        return CallOutcome(result=record.result, replayed=replayed, suspended=record.suspended)

    return call_tool


@task(
    name="model-turn",
    task_run_name="turn-{step}",
    persist_result=True,
    result_serializer="json",
    cache_policy=POSITIONAL_KEY,
)
async def model_turn(session_id: str, step: int, key: str, request: ModelRequest, runtime: TurnRuntime) -> TurnRecord:
    scope = TurnScope(step=step, call_tool=_served_calls(runtime, step), emit=runtime.emit)
    return await produce_turn(request, runtime, scope)


model_turn.on_rollback(note_unstored)
