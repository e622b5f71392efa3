"""Agents composed: another agent as a tool (``Client.as_tool``), and many runs at once
(``Client.map``).

Both start ordinary ``Client.run`` runs whose session ids derive from where they start: the
calling tool call's position, or the batch id and the prompt's index. Resuming the caller
(or rerunning the batch) therefore resumes them too, and their finished steps replay."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, Protocol

import anyio
from pydantic_core import to_json

from ._position import CallPosition, child_session_id
from .errors import describe, map_concurrency_too_low, tool_error_arguments
from .messages import FunctionSpec, RunResult, ToolResult, ToolSpec
from .toolkit import Toolkit

PROMPT_DESCRIPTION = "The task for the agent, with everything it needs to know: it sees nothing else."


class Runner(Protocol):
    """What composition needs of a client: ``Client`` is one."""

    async def run(
        self,
        prompt: str,
        toolkit: Toolkit | None = None,
        *,
        session_id: str | None = None,
        output_type: object,
    ) -> RunResult[Any]: ...


class AgentTool:
    """Another agent as a tool: calling it runs that agent on the ``prompt`` the calling
    model writes, as a flow run nested in the calling tool call's task run. Its session id is
    ``<caller's session>.<turn>.<call index>``, so a crash anywhere resumes it inside the
    caller's resume, with its own finished turns replayed."""

    def __init__(
        self,
        client: Runner,
        *,
        name: str,
        description: str,
        toolkit: Toolkit | None = None,
        output_type: object = None,
        prompt_description: str = PROMPT_DESCRIPTION,
    ) -> None:
        self.client = client
        self.name = name
        self.toolkit = toolkit
        self.output_type = output_type
        parameters = {
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": prompt_description}},
            "required": ["prompt"],
            "additionalProperties": False,
        }
        self.spec = ToolSpec(function=FunctionSpec(name=name, description=description, parameters=parameters))

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        """Called outside a run's tool call (no position): the agent runs in a new session."""
        return await self._run(arguments, None)

    async def call_at(self, arguments: dict[str, Any], position: CallPosition) -> ToolResult:
        """The agent's output (as JSON when typed, else its text); a failed run is an error
        result carrying the run's error, for the calling model to read, and so is a run that
        ends pending (its session is named, for a person to answer and resume it)."""
        return await self._run(arguments, position.child_session_id())

    async def _run(self, arguments: dict[str, Any], session_id: str | None) -> ToolResult:
        prompt = arguments.get("prompt")
        if not isinstance(prompt, str) or set(arguments) != {"prompt"}:
            return ToolResult(
                content=tool_error_arguments(self.name, 'expected {"prompt": "<the task>"}'), is_error=True
            )
        result = await self.client.run(prompt, self.toolkit, session_id=session_id, output_type=self.output_type)
        spent = result.metrics.usage + result.metrics.replayed_usage
        cost = spent if spent.reported else None  # the sub-agent's, shown on its call in the summary
        if result.status == "completed":
            return ToolResult(content=_output_text(result), usage=cost)
        if result.status == "pending" and result.request is not None:
            waiting = f'error: agent "{self.name}" waits for an answer (session "{result.session_id}"): '
            return ToolResult(content=waiting + result.request.prompt, is_error=True, usage=cost)
        return ToolResult(content=f'error: agent "{self.name}" failed: {result.error}', is_error=True, usage=cost)


def _output_text(result: RunResult[Any]) -> str:
    """The validated output as compact JSON (the model's text may have fenced it), else the text."""
    if result.output is None:
        return result.text or ""
    if isinstance(result.output, str):
        return result.output
    return to_json(result.output).decode()


async def map_prompts(
    client: Runner,
    prompts: Iterable[str],
    toolkit: Toolkit | None = None,
    *,
    max_concurrency: int = 4,
    session_id: str | None = None,
    output_type: object = None,
) -> list[RunResult[Any]]:
    """One run per prompt, at most ``max_concurrency`` at once, results in prompt order. With
    ``session_id`` (the batch's id), run ``i`` is session ``<session_id>.<i>``, so running the
    batch again resumes it: finished runs and steps replay. A run that fails, or raises, is
    its own failed result; its siblings go on."""
    if max_concurrency < 1:
        raise map_concurrency_too_low(max_concurrency)
    prompts = list(prompts)
    results: list[RunResult[Any] | None] = [None] * len(prompts)
    limiter = anyio.CapacityLimiter(max_concurrency)

    async def member(index: int, prompt: str) -> None:
        member_id = child_session_id(session_id, index) if session_id is not None else uuid.uuid4().hex
        async with limiter:
            try:
                results[index] = await client.run(prompt, toolkit, session_id=member_id, output_type=output_type)
            except Exception as exc:
                results[index] = RunResult(status="failed", error=describe(exc), session_id=member_id)

    async with anyio.create_task_group() as group:
        for index, prompt in enumerate(prompts):
            group.start_soon(member, index, prompt)
    return [result for result in results if result is not None]
