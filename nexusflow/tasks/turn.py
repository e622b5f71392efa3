"""One model turn as a Prefect task (``turn-{n}``), replayed from storage once finished.
Its task run's log says what the model decided and what the turn cost."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from prefect import get_run_logger, task
from prefect.runtime import flow_run
from prefect.transactions import CommitMode, atransaction
from pydantic import BaseModel, Field
from tenacity import RetryCallState, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from .._support import tracing
from .._support.retrying import Retrying
from ..config.hooks import AfterLlm, BeforeLlm, call_hook
from ..config.subscription import SubscriptionLimit
from ..errors import QuotaExhausted, TransientError
from ..messages import AssistantMessage, Message, ModelReply, ModelRequest, ToolCall, Usage
from ..state.budget import Holder, check, count
from ..state.events import Emit
from ..transports import CallOutcome, CallTool, ModelTransport, TurnScope
from ..transports.fallback import OWN, Fallbacks
from .errors import hook_returned, model_empty_reply
from .keys import POSITIONAL_KEY
from .shown import shown
from .stored import note_unstored
from .subscription import known_spent, record_spent, subscription_slot
from .tool_call import ToolRecord

MAX_RETRY_WAIT = 60.0
"""Seconds a backoff between two attempts of a turn never exceeds."""


class TurnAsked(BaseModel):
    """What a turn's request added to the one before it, exactly what its key hashes: the
    messages new since the previous turn and, at the first turn, the request's settings
    (tools, model, output schema). Every turn's request is rebuilt from these alone (a
    cassette export does), at a cost that grows with the run, not with its square as a
    whole request stored per turn would."""

    new: list[Message]
    settings: dict[str, Any] | None = None


class TurnRecord(BaseModel):
    """What is persisted for a turn: the reply, and what it cost when it really ran."""

    reply: ModelReply
    seconds: float
    answered_by: str | None = None
    """The fallback client that answered, when the run's own had spent its quota."""
    asked: TurnAsked | None = None
    """None in the records of a nexusflow that did not keep it."""
    hooked: list[Literal["before_llm", "after_llm"]] = Field(default_factory=list)
    """The hooks that replaced the turn's request or its reply: the record then holds what
    the hook was given, not what the model was asked or said."""


@dataclass(frozen=True)
class TurnRuntime:
    """The live objects a turn needs, handed over explicitly (quoted: Prefect neither hashes
    nor walks them). ``run_tool`` is the flow's keyed tool call, for an agent that calls
    our tools itself during the turn (ACP); ``limit`` is the subscription whose slot the
    turn's call holds; ``retries`` and ``retry_wait`` are the client's ``model_retries`` and
    ``model_retry_wait``."""

    transport: ModelTransport
    before_llm: BeforeLlm | None = None
    after_llm: AfterLlm | None = None
    run_tool: Callable[[int, int, ToolCall], Awaitable[tuple[ToolRecord, bool]]] | None = None
    emit: Emit | None = None
    limit: SubscriptionLimit | None = None
    retries: int = 0
    retry_wait: float = 1.0
    budget: Holder | None = None
    """The budget the run spends from, its own or the one of the run it is nested in."""
    fallbacks: Fallbacks | None = None
    """Asked in order when the turn's quota is spent (``on_quota="fallback"``)."""
    quota_spent: Callable[[QuotaExhausted, str], None] | None = None
    """Told of each spent quota the turn meets, and what happens next (the run's event)."""
    quota_wait: float = 900.0
    """How long a spent quota whose reset the CLI did not state is kept for ``limit``."""


async def produce_turn(request: ModelRequest, runtime: TurnRuntime, scope: TurnScope | None = None) -> TurnRecord:
    """The turn itself, hooks around the transport's ``generate``, which alone holds a
    slot of the subscription's limit (a replayed turn never gets here: it takes none)."""
    started = time.perf_counter()
    hooked: list[Literal["before_llm", "after_llm"]] = []
    if runtime.before_llm is not None:
        replaced = await call_hook("before_llm", runtime.before_llm, request)
        if replaced is not None:
            if not isinstance(replaced, ModelRequest):
                raise hook_returned("before_llm", replaced)
            request = replaced
            hooked.append("before_llm")
    reply, answered_by = await _answered(request, runtime, scope)
    if runtime.after_llm is not None:
        replaced = await call_hook("after_llm", runtime.after_llm, request, reply)
        if replaced is not None:
            if not isinstance(replaced, ModelReply):
                raise hook_returned("after_llm", replaced)
            reply = replaced
            hooked.append("after_llm")
    if reply.content is None and not reply.tool_calls:
        raise model_empty_reply()
    return TurnRecord(reply=reply, seconds=time.perf_counter() - started, answered_by=answered_by, hooked=hooked)


async def _answered(
    request: ModelRequest, runtime: TurnRuntime, scope: TurnScope | None
) -> tuple[ModelReply, str | None]:
    """The reply, and which fallback gave it: the run's own transport first, then each
    fallback in turn while the quota of the one asked is spent. One known to be spent is
    skipped until its reset."""
    fallbacks = runtime.fallbacks
    last = fallbacks.spent(OWN) if fallbacks is not None else None
    if last is None:
        try:
            return await _generate(request, runtime, runtime.transport, scope), None
        except QuotaExhausted as spent:
            if fallbacks is None or not fallbacks.names:
                raise
            fallbacks.mark(OWN, spent)
            last = spent
    assert fallbacks is not None
    for index, name in enumerate(fallbacks.names):
        if (known := fallbacks.spent(name)) is not None:
            last = known
            continue
        if runtime.quota_spent is not None:
            runtime.quota_spent(last, f"the turn goes to the fallback {name}")
        try:
            transport = await fallbacks.transport(index)
            return await _generate(request, runtime, transport, scope, limited=False), name
        except QuotaExhausted as exc:
            fallbacks.mark(name, exc)
            last = exc
    raise last


async def _generate(
    request: ModelRequest,
    runtime: TurnRuntime,
    transport: ModelTransport,
    scope: TurnScope | None,
    *,
    limited: bool = True,
) -> ModelReply:
    """The transport's ``generate`` under the run's subscription: a quota another run found
    spent fails the turn before any launch, and one this turn finds spent is recorded for
    every run until its reset."""
    limit = runtime.limit if limited else None  # the run's subscription is not a fallback's
    if limit is not None:
        await known_spent(limit)
        try:
            return await _attempts(request, runtime, transport, scope, limit)
        except QuotaExhausted as exc:
            await record_spent(limit, exc, runtime.quota_wait)
            raise
    return await _attempts(request, runtime, transport, scope, limit)


async def _attempts(
    request: ModelRequest,
    runtime: TurnRuntime,
    transport: ModelTransport,
    scope: TurnScope | None,
    limit: SubscriptionLimit | None,
) -> ModelReply:
    """The transport's ``generate``, tried again on a ``TransientError`` up to
    ``runtime.retries`` times with exponential backoff and jitter. Each attempt holds its
    own slot of the subscription, so a backoff holds none. What the failed attempts cost is
    added to the reply's stats; after the last attempt its error is raised, carrying what
    every attempt launched and how many were retried."""
    if runtime.retries == 0:  # the default: no retry object to build for every turn
        async with subscription_slot(limit):
            return await transport.generate(request, scope)
    failed_launches = 0

    def warn(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        get_run_logger().warning(
            "model: transient error, retry %d of %d in %.1fs: %s",
            state.attempt_number,
            runtime.retries,
            wait,
            shown(str(error)),
        )

    retrying = Retrying(
        stop=stop_after_attempt(1 + runtime.retries),
        wait=wait_exponential_jitter(multiplier=runtime.retry_wait, max=MAX_RETRY_WAIT, jitter=runtime.retry_wait),
        retry=retry_if_exception_type(TransientError),
        before_sleep=warn,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                try:
                    async with subscription_slot(limit):
                        reply = await transport.generate(request, scope)
                except TransientError as exc:
                    failed_launches += exc.launches
                    raise
    except TransientError as exc:
        exc.launches = failed_launches
        exc.model_retries = attempt.retry_state.attempt_number - 1
        raise
    retried = attempt.retry_state.attempt_number - 1
    if not retried:
        return reply
    stats = reply.stats.model_copy(
        update={"launches": reply.stats.launches + failed_launches, "model_retries": retried}
    )
    return reply.model_copy(update={"stats": stats})


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
async def model_turn(
    session_id: str, step: int, key: str, request: ModelRequest, runtime: TurnRuntime, since: int = 0
) -> TurnRecord:
    """``since``: how many of the request's messages the turn before it was asked already.

    No wait for the records before it to be on disk: a model turn has no effect that a lost
    record could repeat (it is asked again after a power failure either way), so the tool
    record's sync overlaps this turn; what the turn asks for waits (``synced`` in
    ``tool_call``)."""
    if runtime.budget is not None:
        await check(runtime.budget)
    scope = TurnScope(step=step, call_tool=_served_calls(runtime, step), emit=runtime.emit)
    with (
        tracing.span(chat_name(request), turn_attributes(session_id, step, request)) as current,
        tracing.identity(session_id, flow_run.get_id() if current is not None else None, step),
    ):
        record = await produce_turn(request, runtime, scope)
        if current is not None:
            current.set_attributes(usage_attributes(record.reply.usage))
    settings = request.model_dump(mode="json", exclude={"messages"}) if since == 0 else None
    record = record.model_copy(update={"asked": TurnAsked(new=request.messages[since:], settings=settings)})
    if runtime.budget is not None:
        await count(runtime.budget, key, record.reply.usage)
    _log_decision(record)
    return record


def _log_decision(record: TurnRecord) -> None:
    """One line: what the model decided (the calls it made, an ACP agent's own calls during
    the turn first, else its answer), then what the turn cost. One line, not two: each log
    line costs a turn its trip to the API (``benchmarks/README.md``, ``turn_costs.py``)."""
    reply = record.reply
    served = [call for m in reply.steps if isinstance(m, AssistantMessage) for call in m.tool_calls or []]
    parts: list[str] = []
    if served or reply.tool_calls:
        calls = ", ".join(f"{call.name}({call.arguments})" for call in served + reply.tool_calls)
        parts.append("calls: " + shown(calls))
    if not reply.tool_calls:
        parts.append("answer: " + shown(reply.content or ""))
    retries = f" · retries {reply.stats.model_retries}" if reply.stats.model_retries else ""
    parts.append(
        f"seconds {record.seconds:.2f} · {reply.usage.shown()}"
        f"{f' · model {reply.usage.model}' if reply.usage.model else ''} · launches {reply.stats.launches}{retries}"
        f"{f' · answered by {record.answered_by}' if record.answered_by else ''}"
    )
    get_run_logger().info("%s", " · ".join(parts))


model_turn.on_rollback(note_unstored)


def usage_attributes(usage: Usage | None) -> dict[str, Any]:
    """Tokens as the CLI reported them; a figure it did not report is left out, never 0."""
    if usage is None:
        return {}
    figures = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
        "gen_ai.response.model": usage.model,
    }
    return {name: value for name, value in figures.items() if value is not None}


def chat_name(request: ModelRequest) -> str:
    """``chat {model}``, as the GenAI conventions name an inference span; ``chat`` when the
    run names no model (the CLI's own default answers)."""
    return f"chat {request.model}" if request.model else "chat"


def turn_attributes(session_id: str, step: int, request: ModelRequest) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": request.model,
        "gen_ai.conversation.id": session_id,
        "nexusflow.step": step,
    }
