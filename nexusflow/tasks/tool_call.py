"""One tool call as a Prefect task (``tool-{n}-{name}``); a finished call never runs again."""

from __future__ import annotations

import time
from typing import Any

from prefect import task
from prefect.context import TaskRunContext
from pydantic import BaseModel

from .._runtime import current_active
from ..hooks import call_hook, hook_returned
from ..messages import ToolCall, ToolResult
from .keys import step_key


class ToolRecord(BaseModel):
    result: ToolResult
    seconds: float


def _as_result(hook: str, value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(content=value)
    raise hook_returned(hook, value)


async def execute_tool(call: ToolCall) -> ToolRecord:
    """The call itself, without Prefect: hooks around the toolkit."""
    run = current_active()
    options = run.options
    started = time.perf_counter()
    result: ToolResult | None = None
    if options.before_tool is not None:
        value = await call_hook("before_tool", options.before_tool, call)
        if isinstance(value, ToolCall):
            call = value
        elif isinstance(value, dict):
            call = ToolCall.model_validate({"id": call.id, "name": call.name, "arguments": value})
        elif value is not None:
            result = _as_result("before_tool", value)
    if result is None:
        result = await run.toolkit.call(call.name, call.arguments)
    if options.after_tool is not None:
        value = await call_hook("after_tool", options.after_tool, call, result)
        if isinstance(value, str):
            result = result.model_copy(update={"content": value})
        elif value is not None:
            result = _as_result("after_tool", value)
    return ToolRecord(result=result, seconds=time.perf_counter() - started)


def _tool_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    call: ToolCall = parameters["call"]
    return step_key(parameters["session_id"], parameters["step"], "tool", parameters["index"], call.model_dump())


@task(
    name="tool-call",
    task_run_name="tool-{step}-{call.name}",
    persist_result=True,
    result_serializer="json",
    cache_key_fn=_tool_key,
)
async def tool_call(session_id: str, step: int, index: int, call: ToolCall) -> ToolRecord:
    return await execute_tool(call)
