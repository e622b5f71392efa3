"""``agent_run``: one agent run as a Prefect flow, each turn and tool call a task run."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.context import TaskRunContext
from prefect.filesystems import WritableFileSystem
from prefect.results import ResultStore
from prefect.runtime import flow_run
from prefect.states import Completed, Failed
from prefect.utilities.annotations import quote

from .._lease import session_lease
from .._retry import is_transient
from .._runtime import PendingRun, current_pending
from .._secrets import redact
from .._storage import step_storage
from ..errors import NexusflowError, PrefectApiError, StorageError, describe, unwrap
from ..memory import SessionRecord, read_inputs
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
from ..task_config import StepOptions, TaskConfig
from ..tasks import (
    ToolRecord,
    ToolRuntime,
    TurnRecord,
    TurnRuntime,
    chained_key,
    check_stored,
    forget,
    model_turn,
    remembered,
    suspension,
    tool_call,
    wait,
)
from ..tasks.keys import step_key
from ..transports import SessionTransport
from .loop import LoopState, drive, opening_messages


def preview(prompt: str, limit: int = 500) -> str:
    """What the UI shows of a prompt: flow-run parameters are capped at 512 KB by Prefect,
    so the prompt itself travels by reference (see ``SessionRecord``)."""
    return prompt if len(prompt) <= limit else prompt[:limit] + f"... ({len(prompt)} characters)"


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
async def agent_run(session_id: str, prompt: str = "", inputs: str | None = None) -> RunResult:
    """Run the agent loop for the session's stored inputs (``inputs`` names them; ``prompt``
    is only a preview for the UI). Started by ``Client.run``, which supplies the client and
    toolkit; a rerun with the same ``session_id`` replays finished steps, and one session
    runs in one flow run at a time."""
    pending = current_pending()
    options = pending.options
    toolkit = pending.toolkit
    logger = get_run_logger()
    run_id = str(flow_run.get_id())
    state = LoopState([])
    tools = ToolRuntime(
        toolkit=toolkit, policies=options.policies, before_tool=options.before_tool, after_tool=options.after_tool
    )
    steps = _Steps(session_id, await step_storage(), tools, options.task_config)

    def result(status: Literal["completed", "pending", "failed"], **fields: Any) -> RunResult:
        return RunResult(
            status=status,
            messages=state.messages,
            metrics=state.metrics,
            session_id=session_id,
            flow_run_id=run_id,
            **fields,
        )

    async def turn(step: int, request: ModelRequest) -> tuple[TurnRecord, bool]:
        record, replayed = await steps.turn(step, request)
        calls = ", ".join(call.name for call in record.reply.tool_calls)
        logger.info(
            "turn %d%s: %s", step, " (replayed)" if replayed else "", f"calls {calls}" if calls else "final answer"
        )
        return record, replayed

    async def call(step: int, index: int, tool: ToolCall) -> tuple[ToolRecord, bool]:
        return await steps.tool(step, index, tool)

    async def settle(
        step: int, index: int, tool: ToolCall, record: ToolRecord, replayed: bool
    ) -> tuple[ToolRecord, bool]:
        if record.result.pending is None:
            return record, replayed
        return await _settle(pending, steps, step, index, tool, record), replayed

    async def call_and_settle(step: int, index: int, tool: ToolCall) -> tuple[ToolRecord, bool]:
        record, replayed = await call(step, index, tool)
        return await settle(step, index, tool, record, replayed)

    async def remember(kind: str, inputs: dict[str, object], produce: Callable[[], Awaitable[str]]) -> tuple[str, bool]:
        key = step_key(session_id, 0, kind, 0, inputs)
        task = steps.configured(remembered, options.task_config.wait)
        state = await task(session_id, kind, key, quote(produce), return_state=True)
        value, replayed = str(await state.aresult()), state.name == "Cached"
        check_stored(kind, key, replayed)
        return value, replayed

    try:
        async with session_lease(session_id, run_id):
            record = await _inputs(session_id, inputs, prompt)
            state.messages = opening_messages(
                record.prompt, options.system_prompt, toolkit.instructions, record.history
            )
            async with pending.transport(logger.info) as transport:
                steps.model = TurnRuntime(
                    transport=transport,
                    before_llm=options.before_llm,
                    after_llm=options.after_llm,
                    run_tool=call_and_settle,
                    emit=pending.emit,
                )
                if isinstance(transport, SessionTransport):
                    await transport.begin(remember, toolkit.specs())
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
    except Exception as exc:
        await _publish(session_id, state.messages)
        waiting = unwrap(exc)
        if isinstance(waiting, Suspended):
            logger.info("run pending: %s (request %s)", redact(waiting.request.prompt), waiting.request.id)
            outcome = result("pending", request=waiting.request)
            return Completed(name="AwaitingAnswer", message=str(waiting), data=outcome)  # type: ignore[return-value]
        # The Prefect API's passing trouble reads "prefect: ...", which the client retries.
        error = describe(PrefectApiError(waiting)) if is_transient(waiting) else describe(exc)
        logger.error("run failed: %s", error, exc_info=not isinstance(waiting, NexusflowError))
        outcome = result("failed", error=error)
        return Failed(message=outcome.error, data=outcome)  # type: ignore[return-value]
    await _publish(session_id, state.messages)
    return result("completed", text=text)


async def _inputs(session_id: str, reference: str | None, prompt: str) -> SessionRecord:
    """The run's prompt and history, stored by ``Client.run`` under ``reference``; a flow
    started by hand with only a prompt runs that prompt."""
    if reference is None:
        return SessionRecord(prompt=prompt)
    record = await read_inputs(session_id, reference)
    if record is None:
        raise StorageError(f'storage: the inputs "{reference}" of session "{session_id}" are not in result storage')
    return record


class _Steps:
    """The steps of one run as keyed Prefect tasks. Each key chains the key before it: a
    turn follows the previous turn and hashes only the messages that are new since then; a
    tool call, a suspension and a wait follow the turn that asked for them."""

    def __init__(self, session_id: str, storage: WritableFileSystem, tools: ToolRuntime, config: TaskConfig) -> None:
        self.session_id = session_id
        self.storage = storage
        self.config = config
        self.tools = tools
        self.model: TurnRuntime | None = None
        self.upstream = ""
        self.known = 0
        self.turn_key = ""

    def configured(self, task: Any, options: StepOptions) -> Any:
        return _configured(task, self.storage, options)

    async def turn(self, step: int, request: ModelRequest) -> tuple[TurnRecord, bool]:
        new = [message.model_dump(mode="json", exclude_none=True) for message in request.messages[self.known :]]
        settings = request.model_dump(mode="json", exclude={"messages"}) if not self.upstream else None
        key = chained_key(self.session_id, step, "turn", 0, self.upstream, {"new": new, "settings": settings})
        forget(key)
        self.turn_key = key  # calls an ACP agent makes during the turn follow it
        task = self.configured(model_turn, self.config.turn)
        assert self.model is not None, "the transport is open before the first turn"
        state = await task(self.session_id, step, key, quote(request), quote(self.model), return_state=True)
        record, replayed = TurnRecord.model_validate(await state.aresult()), state.name == "Cached"
        check_stored(f"turn-{step}", key, replayed)
        self.upstream = key
        self.known = len(request.messages)
        return record, replayed

    def tool_key(self, step: int, index: int, call: ToolCall, answer: Answer | None) -> str:
        inputs = {"call": call.model_dump(), "answer": answer.model_dump(mode="json") if answer else None}
        return chained_key(self.session_id, step, "tool", index, self.turn_key, inputs)

    async def tool(
        self, step: int, index: int, call: ToolCall, answer: Answer | None = None
    ) -> tuple[ToolRecord, bool]:
        key = self.tool_key(step, index, call, answer)
        forget(key)
        task = self.configured(tool_call, self.config.tool)
        state = await task(self.session_id, step, index, key, quote(call), quote(self.tools), answer, return_state=True)
        record, replayed = ToolRecord.model_validate(await state.aresult()), state.name == "Cached"
        check_stored(f"tool-{step}-{call.name}", key, replayed)
        return record, replayed

    def asked_key(self, kind: str, step: int, index: int, request: Request) -> str:
        return chained_key(self.session_id, step, kind, index, self.turn_key, request.model_dump(mode="json"))

    async def suspension(self, step: int, index: int, request: Request) -> None:
        key = self.asked_key("suspend", step, index, request)
        forget(key)
        task = self.configured(suspension, self.config.wait)
        state = await task(self.session_id, step, index, key, request, return_state=True)
        await state.aresult()
        check_stored(f"suspend-{step}-{request.tool}", key, state.name == "Cached")

    async def answered(self, step: int, index: int, request: Request) -> bool:
        """Whether this wait was answered in an earlier run (its record is stored)."""
        return await ResultStore(result_storage=self.storage).aexists(self.asked_key("wait", step, index, request))

    async def wait(
        self, step: int, index: int, request: Request, resolve: Callable[[Request], Awaitable[Answer]]
    ) -> Answer:
        key = self.asked_key("wait", step, index, request)
        forget(key)
        task = self.configured(wait, self.config.wait)
        state = await task(self.session_id, step, index, key, request, quote(resolve), return_state=True)
        answer = Answer.model_validate(await state.aresult())
        check_stored(f"wait-{step}-{request.tool}", key, state.name == "Cached")
        return answer


_configured_tasks: dict[tuple[int, int, int], Any] = {}


def _configured(task: Any, storage: WritableFileSystem, options: StepOptions) -> Any:
    """The task with its kind's options, made once per process, storage and options."""
    key = (id(task), id(storage), id(options))
    if key not in _configured_tasks:
        _configured_tasks[key] = task.with_options(**options.task_options(storage))
    return _configured_tasks[key]


async def _settle(
    pending: PendingRun, steps: _Steps, step: int, index: int, call: ToolCall, record: ToolRecord
) -> ToolRecord:
    """Ask about a suspended call (or find the answer already given), then run it once more
    with the answer, or tell the model it was declined, expired or left unresolved."""
    assert record.result.pending is not None
    request = record.result.pending.model_copy(
        update={"id": f"{steps.session_id}.{step}.{index}", "tool": call.name, "arguments": call.arguments}
    )
    await steps.suspension(step, index, request)
    answer = await _answer(pending, steps, step, index, request)
    if answer.ok:
        again, _ = await steps.tool(step, index, call, answer)
        result = again.result if again.result.pending is None else ToolResult(content=outcome_text(request, None))
        seconds = record.seconds + again.seconds
    else:
        result, seconds = ToolResult(content=outcome_text(request, answer)), record.seconds
    return ToolRecord(result=result, seconds=seconds, suspended=True)


async def _answer(pending: PendingRun, steps: _Steps, step: int, index: int, request: Request) -> Answer:
    given = pending.answers.get(request.id)
    wait_for = pending.options.wait_for
    resolve: Callable[[Request], Awaitable[Answer]]
    if given is not None:
        resolve = _constant(given)
    elif wait_for is not None and getattr(wait_for, "in_flow", False) and TaskRunContext.get() is None:
        resolve = _constant(await wait_for(request))
    elif wait_for is not None and not getattr(wait_for, "in_flow", False):
        resolve = wait_for
    elif await steps.answered(step, index, request):
        resolve = _constant(Answer(id=request.id, ok=False, reason="unreachable: the stored answer replays"))
    else:
        raise Suspended(request)
    return await steps.wait(step, index, request, resolve)


def _constant(answer: Answer) -> Callable[[Request], Awaitable[Answer]]:
    async def resolve(request: Request) -> Answer:
        return answer

    return resolve


async def _publish(session_id: str, messages: list[Message]) -> None:
    await acreate_markdown_artifact(
        key=_artifact_key(session_id), markdown=redact(_transcript(messages)), description="Transcript of the agent run"
    )
