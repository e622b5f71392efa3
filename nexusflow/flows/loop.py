"""The agent loop, independent of Prefect: the flow runs it with task-wrapped steps, the
benchmark with plain ones, so both measure the very same loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import ValidationError

from ..config.output import OutputSpec, complaint
from ..errors import MaxTurnsExceeded
from ..messages import (
    Message,
    ModelRequest,
    RunMetrics,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolSpec,
    UserMessage,
)
from ..state.events import Emit, TextChunk, ToolCallFinished, ToolCallStarted
from ..tasks import ToolRecord, TurnRecord
from .errors import output_mismatch, tool_error_not_run

TurnStep = Callable[[int, ModelRequest], Awaitable[tuple[TurnRecord, bool]]]
"""(step, request) -> (record, replayed)"""

ToolStep = Callable[[int, int, ToolCall], Awaitable[tuple[ToolRecord, bool]]]
"""(step, index, call) -> (record, replayed)"""

SettleStep = Callable[[int, int, ToolCall, ToolRecord, bool], Awaitable[tuple[ToolRecord, bool]]]
"""A suspended call's record -> the record the model reads (after asking); others pass."""


@dataclass
class LoopState:
    """The transcript and metrics so far; kept by the caller so a failed run still reports
    how far it got. ``output`` is the final answer validated into the output type."""

    messages: list[Message]
    metrics: RunMetrics = field(default_factory=RunMetrics)
    output: Any = None


def opening_messages(
    prompt: str, system_prompt: str | None, instructions: str | None, history: list[Message] | None = None
) -> list[Message]:
    """The system message (system prompt and skills), an earlier conversation, the prompt."""
    system = "\n\n".join(part for part in (system_prompt, instructions) if part)
    messages: list[Message] = [SystemMessage(content=system)] if system else []
    messages.extend(message for message in history or [] if not isinstance(message, SystemMessage))
    messages.append(UserMessage(content=prompt))
    return messages


async def _run_calls(
    step: int, calls: list[ToolCall], run_tool: ToolStep, at_once: int
) -> list[tuple[ToolRecord, bool]]:
    """The calls of one turn, at most ``at_once`` at a time; results come back in call order.
    A call that raises ``KeyboardInterrupt`` or ``SystemExit`` stops its siblings and is
    raised here as itself: in the task group's ``BaseExceptionGroup`` a caller's ``except
    KeyboardInterrupt`` would miss it, and raised bare in a child task it would stop the
    event loop under the run."""
    results: list[tuple[ToolRecord, bool] | None] = [None] * len(calls)
    stopped: list[KeyboardInterrupt | SystemExit] = []
    slots = anyio.CapacityLimiter(at_once)

    async def one(index: int, call: ToolCall) -> None:
        try:
            async with slots:
                results[index] = await run_tool(step, index, call)
        except (KeyboardInterrupt, SystemExit) as exc:
            stopped.append(exc)
            group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        for index, call in enumerate(calls):
            group.start_soon(one, index, call)
    if stopped:
        raise stopped[0]
    return [result for result in results if result is not None]  # every slot is filled once the group exits


def _not_run(calls: list[ToolCall], limit: int) -> list[tuple[ToolRecord, bool]]:
    """The answers to the calls of a reply past ``limit``: errors the model reads, with no
    task run each (the same reply gives the same answers when its turn replays)."""
    said = [tool_error_not_run(call.name, len(calls), limit) for call in calls[limit:]]
    return [(ToolRecord(result=ToolResult(content=text, is_error=True), seconds=0.0), False) for text in said]


def _count_turn(metrics: RunMetrics, record: TurnRecord, replayed: bool) -> None:
    reply = record.reply
    stats = reply.stats
    metrics.turns += 1
    metrics.tool_calls += stats.tool_calls
    metrics.tool_errors += stats.tool_errors
    metrics.suspensions += stats.suspensions
    if stats.stop_reason is not None:
        metrics.stop_reasons.append(stats.stop_reason)
    usage = reply.usage
    if usage.model is not None and usage.model not in metrics.models:
        metrics.models.append(usage.model)
    if replayed:
        metrics.replayed_usage += usage
        metrics.replayed_turns += 1
        metrics.replayed_tool_calls += stats.tool_calls
        metrics.turn_seconds.append(0.0)
        return
    metrics.usage += usage
    metrics.turns_without_usage += not usage.reported
    metrics.turns_without_cost += usage.cost_usd is None
    metrics.replayed_tool_calls += stats.replayed_tool_calls
    metrics.tool_seconds += stats.tool_seconds
    metrics.model_seconds += record.seconds
    metrics.turn_seconds.append(record.seconds)
    metrics.launches += stats.launches
    metrics.repairs += stats.repairs
    metrics.model_retries += stats.model_retries


def _count_tool(metrics: RunMetrics, record: ToolRecord, replayed: bool) -> None:
    metrics.tool_calls += 1
    metrics.tool_errors += record.result.is_error
    metrics.suspensions += record.suspended or record.result.pending is not None
    if replayed:
        metrics.replayed_tool_calls += 1
    else:
        metrics.tool_seconds += record.seconds


async def _settle_all(
    metrics: RunMetrics,
    step: int,
    calls: list[ToolCall],
    results: list[tuple[ToolRecord, bool]],
    settle: SettleStep,
) -> list[tuple[ToolRecord, bool]]:
    """The turn's calls settled in call order. A run that ends here (pending, or failed)
    still counts every call of the turn that ran."""
    settled: list[tuple[ToolRecord, bool]] = []
    try:
        for index, (call, (record, replayed)) in enumerate(zip(calls, results, strict=True)):
            settled.append(await settle(step, index, call, record, replayed))
    except BaseException:
        for record, replayed in [*settled, *results[len(settled) :]]:
            _count_tool(metrics, record, replayed)
        raise
    return settled


async def drive(
    state: LoopState,
    *,
    tools: list[ToolSpec],
    model: str | None,
    max_turns: int,
    run_turn: TurnStep,
    run_tool: ToolStep,
    settle: SettleStep | None = None,
    emit: Emit | None = None,
    output: OutputSpec | None = None,
    output_retries: int = 0,
    max_tool_calls: int,
    max_parallel_tool_calls: int,
) -> str:
    """Run turns until the model answers without tool calls; return that answer.
    The first ``max_tool_calls`` calls of a turn run, ``max_parallel_tool_calls`` at a time,
    and each call past them is answered with an error; then ``settle`` handles the ones that suspended,
    one after another in call order. ``emit`` receives stream events as the run goes.
    With ``output``, the answer must validate into it (``state.output``): an invalid one
    is sent back with pydantic's errors, up to ``output_retries`` times, each a turn."""
    send = emit or (lambda event: None)
    response_format = output.response_format if output is not None else None
    for step in range(max_turns):
        # Every message is already a validated model: validating the transcript again would
        # cost each turn time in proportion to the run's length (121 us at 200 turns).
        request = ModelRequest.model_construct(
            messages=list(state.messages), tools=tools, model=model, response_format=response_format
        )
        record, replayed = await run_turn(step, request)
        _count_turn(state.metrics, record, replayed)
        reply = record.reply
        state.messages.extend(reply.steps)
        state.messages.append(reply.as_message())
        if reply.content and not (reply.stats.streamed and not replayed):
            send(TextChunk(step=step, text=reply.content))
        if not reply.tool_calls:
            text = reply.content or ""
            if output is None:
                return text
            try:
                state.output = output.validate(text)
                return text
            except ValidationError as exc:
                errors = complaint(exc)
            if state.metrics.output_repairs >= output_retries or step == max_turns - 1:
                raise output_mismatch(output.name, state.metrics.output_repairs, errors)
            state.metrics.output_repairs += 1
            state.messages.append(UserMessage(content=output.repair(errors)))
            continue
        if step == max_turns - 1:
            break
        for call in reply.tool_calls:
            send(ToolCallStarted(step=step, call=call))
        calls = reply.tool_calls[:max_tool_calls]
        results = await _run_calls(step, calls, run_tool, max_parallel_tool_calls)
        if settle is not None:
            results = await _settle_all(state.metrics, step, calls, results, settle)
        results += _not_run(reply.tool_calls, max_tool_calls)
        for call, (tool_record, tool_replayed) in zip(reply.tool_calls, results, strict=True):
            _count_tool(state.metrics, tool_record, tool_replayed)
            send(ToolCallFinished(step=step, call=call, result=tool_record.result))
            state.messages.append(ToolMessage(tool_call_id=call.id, content=tool_record.result.content))
    raise MaxTurnsExceeded(max_turns)
