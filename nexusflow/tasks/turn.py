"""One model turn as a Prefect task (``turn-{n}``), replayed from storage once finished.
Its task run's log says what the model decided and what the turn cost."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prefect import get_run_logger, task
from prefect.transactions import CommitMode, atransaction
from pydantic import BaseModel

from ..errors import ModelError
from ..events import Emit
from ..hooks import AfterLlm, BeforeLlm, call_hook, hook_returned
from ..limits import SubscriptionLimit
from ..messages import AssistantMessage, ModelReply, ModelRequest, ToolCall
from ..transports import CallOutcome, CallTool, ModelTransport, TurnScope
from .keys import POSITIONAL_KEY
from .limits import subscription_slot
from .shown import shown
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
    our tools itself during the turn (ACP); ``limit`` is the subscription whose slot the
    turn's call holds."""

    transport: ModelTransport
    before_llm: BeforeLlm | None = None
    after_llm: AfterLlm | None = None
    run_tool: Callable[[int, int, ToolCall], Awaitable[tuple[ToolRecord, bool]]] | None = None
    emit: Emit | None = None
    limit: SubscriptionLimit | None = None


async def produce_turn(request: ModelRequest, runtime: TurnRuntime, scope: TurnScope | None = None) -> TurnRecord:
    """The turn itself, hooks around the transport's ``generate``, which alone holds a
    slot of the subscription's limit (a replayed turn never gets here: it takes none)."""
    started = time.perf_counter()
    if runtime.before_llm is not None:
        replaced = await call_hook("before_llm", runtime.before_llm, request)
        if replaced is not None:
            if not isinstance(replaced, ModelRequest):
                raise hook_returned("before_llm", replaced)
            request = replaced
    async with subscription_slot(runtime.limit):
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
    record = await produce_turn(request, runtime, scope)
    _log_decision(record)
    return record


def _log_decision(record: TurnRecord) -> None:
    """What the model decided: the calls it made (an ACP agent's own calls during the turn
    first), else its answer; then what the turn cost."""
    reply, logger = record.reply, get_run_logger()
    served = [call for m in reply.steps if isinstance(m, AssistantMessage) for call in m.tool_calls or []]
    if served or reply.tool_calls:
        calls = ", ".join(f"{call.name}({call.arguments})" for call in served + reply.tool_calls)
        logger.info("calls: %s", shown(calls))
    if not reply.tool_calls:
        logger.info("answer: %s", shown(reply.content or ""))
    logger.info(
        "seconds %.2f · tokens %d in / %d out · launches %d",
        record.seconds,
        reply.usage.input_tokens,
        reply.usage.output_tokens,
        reply.stats.launches,
    )


model_turn.on_rollback(note_unstored)
