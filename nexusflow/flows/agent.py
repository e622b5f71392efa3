"""``agent_run``: one agent run as a Prefect flow, each turn and tool call a task run."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.runtime import flow_run
from prefect.states import Failed
from prefect.utilities.annotations import quote

from .._runtime import ActiveRun, active_run, current_pending
from ..errors import NexusflowError, describe, unwrap
from ..messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    RunResult,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ..tasks import ToolRecord, TurnRecord, model_turn, remembered, tool_call
from ..transports import SessionTransport
from .loop import LoopState, drive, opening_messages


async def _prefect_turn(session_id: str, step: int, request: ModelRequest) -> tuple[TurnRecord, bool]:
    state = await model_turn(session_id, step, quote(request), return_state=True)  # type: ignore[misc]
    return TurnRecord.model_validate(await state.aresult()), state.name == "Cached"


async def _prefect_tool(session_id: str, step: int, index: int, call: ToolCall) -> tuple[ToolRecord, bool]:
    state = await tool_call(session_id, step, index, quote(call), return_state=True)  # type: ignore[misc]
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
async def agent_run(prompt: str, session_id: str) -> RunResult:
    """Run the agent loop for ``prompt``. Started by ``Client.run``, which supplies the
    client and toolkit; a rerun with the same ``session_id`` replays finished steps."""
    pending = current_pending()
    options = pending.client.options
    toolkit = pending.toolkit
    logger = get_run_logger()
    run_id = str(flow_run.get_id())
    state = LoopState(opening_messages(prompt, options.system_prompt, toolkit.instructions))

    async def turn(step: int, request: ModelRequest) -> tuple[TurnRecord, bool]:
        record, replayed = await _prefect_turn(session_id, step, request)
        calls = ", ".join(call.name for call in record.reply.tool_calls)
        logger.info(
            "turn %d%s: %s", step, " (replayed)" if replayed else "", f"calls {calls}" if calls else "final answer"
        )
        return record, replayed

    async def call(step: int, index: int, tool: ToolCall) -> tuple[ToolRecord, bool]:
        return await _prefect_tool(session_id, step, index, tool)

    async def remember(kind: str, inputs: dict[str, object], produce: Callable[[], Awaitable[str]]) -> tuple[str, bool]:
        state = await remembered(session_id, kind, inputs, quote(produce), return_state=True)  # type: ignore[misc]
        return str(await state.aresult()), state.name == "Cached"

    try:
        async with pending.client.transport() as transport:
            run = ActiveRun(
                options=options,
                toolkit=toolkit,
                transport=transport,
                session_id=session_id,
                run_tool=call,
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
                    emit=pending.emit,
                )
            finally:
                active_run.reset(token)
    except Exception as exc:
        logger.error("run failed: %s", describe(exc), exc_info=not isinstance(unwrap(exc), NexusflowError))
        result = RunResult(
            status="failed",
            error=describe(exc),
            messages=state.messages,
            metrics=state.metrics,
            session_id=session_id,
            flow_run_id=run_id,
        )
        await _publish(session_id, state.messages)
        return Failed(message=result.error, data=result)  # type: ignore[return-value]
    await _publish(session_id, state.messages)
    return RunResult(
        status="completed",
        text=text,
        messages=state.messages,
        metrics=state.metrics,
        session_id=session_id,
        flow_run_id=run_id,
    )


async def _publish(session_id: str, messages: list[Message]) -> None:
    await acreate_markdown_artifact(
        key=_artifact_key(session_id), markdown=_transcript(messages), description="Transcript of the agent run"
    )
