"""``agent_run``: one agent run as a Prefect flow, each turn and tool call a task run."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.context import TaskRunContext
from prefect.results import get_result_store
from prefect.runtime import flow_run
from prefect.states import Completed, Failed
from prefect.utilities.annotations import quote

from .._runtime import ActiveRun, PendingRun, active_run, current_pending
from ..errors import NexusflowError, describe, unwrap
from ..messages import (
    Answer,
    AssistantMessage,
    Message,
    ModelRequest,
    Request,
    RunResult,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    UserMessage,
)
from ..suspension import Suspended, outcome_text
from ..tasks import ToolRecord, TurnRecord, model_turn, remembered, suspension, tool_call, wait, wait_key
from ..transports import SessionTransport
from .loop import LoopState, drive, opening_messages


async def _prefect_turn(session_id: str, step: int, request: ModelRequest) -> tuple[TurnRecord, bool]:
    state = await model_turn(session_id, step, quote(request), return_state=True)  # type: ignore[misc]
    return TurnRecord.model_validate(await state.aresult()), state.name == "Cached"


async def _prefect_tool(
    session_id: str, step: int, index: int, call: ToolCall, answer: Answer | None = None
) -> tuple[ToolRecord, bool]:
    state = await tool_call(session_id, step, index, quote(call), answer, return_state=True)  # type: ignore[misc]
    return ToolRecord.model_validate(await state.aresult()), state.name == "Cached"


def _transcript(messages: list[Message]) -> str:
    lines: list[str] = []
    for message in messages:
        if isinstance(message, SystemMessage | UserMessage):
            lines.append(f"**{message.role}**\n\n{message.content}")
        elif isinstance(message, AssistantMessage):
            calls = "".join(f"\n- `{c.name}({c.arguments})` ({c.id})" for c in message.tool_calls or [])
            lines.append(f"**assistant**\n\n{message.content or ''}{calls}")
        elif isinstance(message, ToolMessage):
            lines.append(f"**tool** ({message.tool_call_id})\n\n```\n{message.content}\n```")
    return "\n\n---\n\n".join(lines)


def _artifact_key(session_id: str) -> str:
    return "transcript-" + (re.sub(r"[^a-z0-9-]+", "-", session_id.lower()).strip("-") or "run")


@flow(name="agent_run", flow_run_name="agent-{session_id}", validate_parameters=True)
async def agent_run(prompt: str, session_id: str, history: list[Message] | None = None) -> RunResult:
    """Run the agent loop for ``prompt`` (after ``history``, an earlier conversation).
    Started by ``Client.run``, which supplies the client and toolkit; a rerun with the same
    ``session_id`` replays finished steps."""
    pending = current_pending()
    options = pending.client.options
    toolkit = pending.toolkit
    logger = get_run_logger()
    run_id = str(flow_run.get_id())
    state = LoopState(opening_messages(prompt, options.system_prompt, toolkit.instructions, history))

    async def turn(step: int, request: ModelRequest) -> tuple[TurnRecord, bool]:
        record, replayed = await _prefect_turn(session_id, step, request)
        calls = ", ".join(call.name for call in record.reply.tool_calls)
        logger.info(
            "turn %d%s: %s", step, " (replayed)" if replayed else "", f"calls {calls}" if calls else "final answer"
        )
        return record, replayed

    async def call(step: int, index: int, tool: ToolCall) -> tuple[ToolRecord, bool]:
        return await _prefect_tool(session_id, step, index, tool)

    async def settle(
        step: int, index: int, tool: ToolCall, record: ToolRecord, replayed: bool
    ) -> tuple[ToolRecord, bool]:
        if record.result.pending is None:
            return record, replayed
        return await _settle(pending, session_id, step, index, tool, record), replayed

    async def call_and_settle(step: int, index: int, tool: ToolCall) -> tuple[ToolRecord, bool]:
        record, replayed = await call(step, index, tool)
        return await settle(step, index, tool, record, replayed)

    async def remember(kind: str, inputs: dict[str, object], produce: Callable[[], Awaitable[str]]) -> tuple[str, bool]:
        state = await remembered(session_id, kind, inputs, quote(produce), return_state=True)  # type: ignore[misc]
        return str(await state.aresult()), state.name == "Cached"

    def result(status: Literal["completed", "pending", "failed"], **fields: Any) -> RunResult:
        return RunResult(
            status=status,
            messages=state.messages,
            metrics=state.metrics,
            session_id=session_id,
            flow_run_id=run_id,
            **fields,
        )

    try:
        async with pending.client.transport() as transport:
            run = ActiveRun(
                options=options,
                toolkit=toolkit,
                transport=transport,
                session_id=session_id,
                run_tool=call_and_settle,
                emit=pending.emit,
            )
            token = active_run.set(run)
            try:
                if isinstance(transport, SessionTransport):
                    await transport.begin(remember)
                text = await drive(
                    state,
                    tools=toolkit.specs(),
                    model=options.model,
                    max_turns=options.max_turns,
                    run_turn=turn,
                    run_tool=call,
                    settle=settle,
                    emit=pending.emit,
                )
            finally:
                active_run.reset(token)
    except Exception as exc:
        await _publish(session_id, state.messages)
        waiting = unwrap(exc)
        if isinstance(waiting, Suspended):
            logger.info("run pending: %s (request %s)", waiting.request.prompt, waiting.request.id)
            outcome = result("pending", request=waiting.request)
            return Completed(name="AwaitingAnswer", message=str(waiting), data=outcome)  # type: ignore[return-value]
        logger.error("run failed: %s", describe(exc), exc_info=not isinstance(waiting, NexusflowError))
        outcome = result("failed", error=describe(exc))
        return Failed(message=outcome.error, data=outcome)  # type: ignore[return-value]
    await _publish(session_id, state.messages)
    return result("completed", text=text)


async def _settle(
    pending: PendingRun, session_id: str, step: int, index: int, call: ToolCall, record: ToolRecord
) -> ToolRecord:
    """Ask about a suspended call (or find the answer already given), then run it once more
    with the answer, or tell the model it was declined, expired or left unresolved."""
    assert record.result.pending is not None
    request = record.result.pending.model_copy(
        update={"id": f"{session_id}.{step}.{index}", "tool": call.name, "arguments": call.arguments}
    )
    await suspension(session_id, step, index, request)
    answer = await _answer(pending, session_id, step, index, request)
    if answer.ok:
        again, _ = await _prefect_tool(session_id, step, index, call, answer)
        result = again.result if again.result.pending is None else ToolResult(content=outcome_text(request, None))
        seconds = record.seconds + again.seconds
    else:
        result, seconds = ToolResult(content=outcome_text(request, answer)), record.seconds
    return ToolRecord(result=result, seconds=seconds, suspended=True)


async def _answer(pending: PendingRun, session_id: str, step: int, index: int, request: Request) -> Answer:
    given = pending.answers.get(request.id)
    wait_for = pending.client.options.wait_for
    resolve: Callable[[Request], Awaitable[Answer]]
    if given is not None:
        resolve = _constant(given)
    elif wait_for is not None and getattr(wait_for, "in_flow", False) and TaskRunContext.get() is None:
        resolve = _constant(await wait_for(request))
    elif wait_for is not None and not getattr(wait_for, "in_flow", False):
        resolve = wait_for
    elif await get_result_store().aexists(wait_key(session_id, step, index, request)):
        resolve = _constant(Answer(id=request.id, ok=False, reason="unreachable: the stored answer replays"))
    else:
        raise Suspended(request)
    state = await wait(session_id, step, index, request, quote(resolve), return_state=True)  # type: ignore[misc]
    return Answer.model_validate(await state.aresult())


def _constant(answer: Answer) -> Callable[[Request], Awaitable[Answer]]:
    async def resolve(request: Request) -> Answer:
        return answer

    return resolve


async def _publish(session_id: str, messages: list[Message]) -> None:
    await acreate_markdown_artifact(
        key=_artifact_key(session_id), markdown=_transcript(messages), description="Transcript of the agent run"
    )
