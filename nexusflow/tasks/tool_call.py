"""One tool call as a Prefect task (``tool-{n}-{name}``); a finished call never runs again.

Its task run's page shows the call: one log line with its arguments and its result (a call
still running after ``ANNOUNCED_AFTER`` seconds logs its arguments then, and its result on a
second line), and a state named ``ToolError`` or ``AwaitingAnswer`` for a call that failed or
suspended. Both are Completed-type states: the model reads the error and the run goes on,
and the record is stored under the call's key like any other, so a resumed run replays it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from prefect import get_run_logger, task
from prefect.client.schemas.objects import State
from prefect.states import Completed
from pydantic import BaseModel

from .._prefect.locks import slot
from .._prefect.storage import synced
from .._support import tracing
from ..config.hooks import AfterTool, BeforeTool, call_hook
from ..config.policies import ToolPolicy, concurrency_limit_name, policy_for
from ..config.settings import ARGUMENT_DEPTH, TOOL_RESULT
from ..messages import Answer, Request, ToolCall, ToolResult, nests_deeper
from ..state._position import CallPosition
from ..state.suspension import Suspension, answer_var
from ..toolkit import Toolkit
from .errors import hook_returned, tool_error_too_deep, tool_error_too_large
from .keys import POSITIONAL_KEY
from .shown import shown
from .stored import note_unstored

ANNOUNCED_AFTER = 1.0
"""Seconds after which a running call's page shows its arguments. A log line costs a turn its trip
to Prefect's API (``benchmarks/README.md``, ``turn_costs.py``), so a quick call logs one line:
arguments and result together."""


class ToolRecord(BaseModel):
    result: ToolResult
    seconds: float
    suspended: bool = False


def _as_result(hook: str, value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(content=value)
    if isinstance(value, Suspension):
        return ToolResult(content=f"pending: {value.request.prompt}", pending=value.request)
    raise hook_returned(hook, value)


@asynccontextmanager
async def _limited(policy: ToolPolicy, tool: str) -> AsyncIterator[None]:
    """Hold one of the tool's ``concurrency`` slots, across all runs."""
    if policy.concurrency is None:
        yield
        return
    async with slot(concurrency_limit_name(tool), policy.concurrency):
        yield


@dataclass(frozen=True)
class ToolRuntime:
    """The live objects a tool call needs, handed over explicitly (quoted: Prefect neither
    hashes nor walks them)."""

    toolkit: Toolkit
    policies: Mapping[str, ToolPolicy] = field(default_factory=dict)
    before_tool: BeforeTool | None = None
    after_tool: AfterTool | None = None
    max_result: int = TOOL_RESULT
    """Bytes (UTF-8) of a result the model reads and the record keeps; a larger one becomes an error."""
    max_depth: int = ARGUMENT_DEPTH
    """Levels the arguments may nest; deeper ones are an error, before anything decodes them."""


def _bounded(name: str, result: ToolResult, limit: int) -> ToolResult:
    """The result, or the error that replaces one over ``limit`` bytes: never stored whole."""
    size = len(result.content) if result.content.isascii() else len(result.content.encode())
    if size <= limit or result.pending is not None:
        return result
    return ToolResult(content=tool_error_too_large(name, size, limit), is_error=True, usage=result.usage)


async def execute_tool(
    call: ToolCall, runtime: ToolRuntime, answer: Answer | None = None, position: CallPosition | None = None
) -> ToolRecord:
    """The call itself, without Prefect: approval policy and hooks around the toolkit, within
    the runtime's bounds (the arguments' depth is checked before anything decodes them).
    ``answer`` is set when the call runs again after a suspension was answered yes;
    ``position`` is where the call sits in its run (an agent as a tool derives its session
    from it)."""
    started = time.perf_counter()
    if nests_deeper(call.arguments, runtime.max_depth):
        refused = ToolResult(content=tool_error_too_deep(call.name, runtime.max_depth), is_error=True)
        return ToolRecord(result=refused, seconds=time.perf_counter() - started)
    policy = policy_for(runtime.policies, call.name)
    token = answer_var.set(answer)
    try:
        result: ToolResult | None = None
        if answer is None and policy.needs_approval(call.arguments):
            prompt = f'Allow the tool "{call.name}" to run with {call.arguments}?'
            result = ToolResult(content=f"pending: {prompt}", pending=Request(prompt=prompt))
        elif runtime.before_tool is not None:
            value = await call_hook("before_tool", runtime.before_tool, call)
            if isinstance(value, ToolCall):
                call = value
            elif isinstance(value, dict):
                call = ToolCall.model_validate({"id": call.id, "name": call.name, "arguments": value})
            elif value is not None:
                result = _as_result("before_tool", value)
        if result is None:
            async with _limited(policy, call.name):
                result = await runtime.toolkit.call(call.name, call.arguments, policy, position)
        if runtime.after_tool is not None and result.pending is None:
            value = await call_hook("after_tool", runtime.after_tool, call, result)
            if isinstance(value, str):
                result = ToolResult(content=value, is_error=result.is_error)
            elif value is not None:
                result = _as_result("after_tool", value)
    finally:
        answer_var.reset(token)
    return ToolRecord(result=_bounded(call.name, result, runtime.max_result), seconds=time.perf_counter() - started)


@task(
    name="tool-call",
    task_run_name="{run_name}",
    persist_result=True,
    result_serializer="json",
    cache_policy=POSITIONAL_KEY,
)
async def tool_call(
    session_id: str,
    step: int,
    index: int,
    key: str,
    run_name: str,
    call: ToolCall,
    runtime: ToolRuntime,
    answer: Answer | None = None,
) -> State[ToolRecord]:
    """``run_name`` is the task run's name (the flow makes it: see ``Steps``); the key alone
    decides what replays."""
    await synced(session_id)
    logger = get_run_logger()
    arguments = f"arguments: {shown(call.arguments)}"
    said = False

    def announce() -> None:
        nonlocal said
        said = True
        logger.info("%s", arguments)

    announced = asyncio.get_running_loop().call_later(ANNOUNCED_AFTER, announce)
    try:
        with tracing.span(f"execute_tool {call.name}", tool_attributes(session_id, step, call)) as current:
            record = await execute_tool(call, runtime, answer, CallPosition(session_id, step, index))
            if record.result.is_error:
                tracing.failed(current, shown(record.result.content))
    finally:
        announced.cancel()
    prefix = "" if said else f"{arguments} · "
    result = record.result
    if result.pending is not None:
        prompt = shown(result.pending.prompt)
        logger.info("%spending: %s", prefix, prompt)
        return Completed(name="AwaitingAnswer", message=prompt, data=record)
    content = shown(result.content)
    if result.is_error:
        logger.info("%serror: %s", prefix, content.removeprefix("error: "))
        return Completed(name="ToolError", message=content, data=record)
    logger.info("%sresult: %s", prefix, content)
    return Completed(data=record)


tool_call.on_rollback(note_unstored)


def tool_attributes(session_id: str, step: int, call: ToolCall) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": session_id,
        "nexusflow.step": step,
    }
