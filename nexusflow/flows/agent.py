"""``agent_run``: one agent run as a Prefect flow, each turn and tool call a task run."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal
from uuid import UUID

import anyio
from prefect import Flow, flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.filesystems import WritableFileSystem
from prefect.runtime import flow_run
from prefect.states import Completed, Failed, Paused
from prefect.utilities.annotations import quote

from .._lease import session_lease
from .._retry import is_transient
from .._runtime import LiveRun
from .._secrets import redact
from .._storage import step_storage, synced
from ..budget import Holder, spends_from
from ..errors import (
    AuthRequired,
    NoRuntimeError,
    PrefectApiError,
    QuotaExhausted,
    SessionTakenOverError,
    StorageError,
    TransientError,
    describe,
    storage_inputs_missing,
    unwrap,
)
from ..memory import (
    SessionRecord,
    SessionState,
    SessionStatus,
    SessionStore,
    StorageConversationStore,
    read_inputs,
    write_inputs,
    write_nesting,
    write_status,
)
from ..messages import Answer, Message, ModelRequest, RunResult, SystemMessage, ToolCall
from ..options import ClientOptions
from ..output import OutputSpec
from ..suspension import Suspended
from ..tasks import (
    ToolRecord,
    ToolRuntime,
    TurnRecord,
    TurnRuntime,
    check_stored,
    remembered,
)
from ..tasks.keys import step_key
from ..transports import ModelTransport, SessionTransport
from ..transports.fallback import Fallbacks
from ..waits import waiting_is_no_error
from . import notify, quiet
from .interrupt import interruptible
from .loop import LoopState, drive, opening_messages
from .quota import reset_of, wait_until
from .report import Progress, publish
from .steps import Steps, asked
from .steps import settle as settle_call

AWAITING = "AwaitingAnswer"
"""The Paused-type state of a flow run that ended waiting for an answer."""
ANSWERED = "Answered"
"""The Completed-type state it is moved to when its session goes on with the answer."""


def preview(prompt: str, limit: int = 500) -> str:
    """What the UI shows of a prompt: flow-run parameters are capped at 512 KB by Prefect,
    so the prompt itself travels by reference (see ``SessionRecord``)."""
    return prompt if len(prompt) <= limit else prompt[:limit] + f"... ({len(prompt)} characters)"


@flow(name="agent_run", flow_run_name="agent-{session_id}", validate_parameters=True, persist_result=False)
async def agent_run(session_id: str, prompt: str = "", inputs: str | None = None, live: LiveRun | None = None) -> quote:
    """Run the agent loop for the session's stored inputs (``inputs`` names them; ``prompt``
    is only a preview for the UI). Started by ``Client.run``, whose ``live`` carries the
    client and toolkit; a rerun with the same ``session_id`` replays finished steps, and one
    session runs in one flow run at a time.

    The result goes back to ``Client.run`` quoted and unpersisted: its steps are already
    stored, and Prefect walks a flow's return value for futures, object by object (a cost that
    grows with the run, ``benchmarks/README.md``), which a quote stops at the top."""
    if live is None:
        raise NoRuntimeError()
    options = live.options
    toolkit = live.toolkit
    logger = get_run_logger()
    run_id = str(flow_run.get_id())
    state = LoopState([])
    tools = ToolRuntime(
        toolkit=toolkit,
        policies=options.policies,
        before_tool=options.before_tool,
        after_tool=options.after_tool,
        max_result=options.max_tool_result,
        max_depth=options.max_argument_depth,
    )
    steps = Steps(session_id, await step_storage(), tools, options.task_config)
    progress = Progress(session_id, options.max_turns)

    def result(status: Literal["completed", "pending", "failed"], **fields: Any) -> RunResult:
        return RunResult(
            status=status,
            messages=state.messages,
            metrics=state.metrics,
            session_id=session_id,
            flow_run_id=run_id,
            **fields,
        )

    async def left_for_the_reset(shown: str) -> None:
        status = SessionStatus(state="waiting", flow_run_id=run_id, updated=_now(), waits_for=f"quota reset at {shown}")
        await write_status(session_id, status)

    def quota_spent(exc: QuotaExhausted, then: str, fails: bool = False) -> None:
        """Announced and logged; a run that fails says so in the UI only: its caller says it (see ``quiet``)."""
        logger.warning("%s; %s", exc, then, extra=quiet.UI_ONLY if fails else None)
        notify.quota_exhausted(session_id, run_id, exc, options.on_quota, then)

    async def turn(step: int, request: ModelRequest) -> tuple[TurnRecord, bool]:
        await lease.check()
        while True:
            try:
                record, replayed = await steps.turn(step, request)
                break
            except QuotaExhausted as exc:
                until = reset_of(exc, options)
                if until is None:
                    quota_spent(exc, "the run fails", fails=True)
                    raise
                shown = until.isoformat(timespec="seconds")
                quota_spent(exc, f"the run waits until {shown}, then asks again")
                await progress.waiting(step, shown)
                await wait_until(until, partial(left_for_the_reset, shown))
        if replayed:  # a live turn logs what it decided in its own task run
            calls = ", ".join(call.name for call in record.reply.tool_calls)
            logger.info("turn %d replayed: %s", step, f"calls {calls}" if calls else "final answer")
        await progress.turn_done(step + 1)
        return record, replayed

    async def call(step: int, index: int, tool: ToolCall, answer: Answer | None = None) -> tuple[ToolRecord, bool]:
        """A call (or, with ``answer``, its approved run): a live one that fails is announced."""
        await lease.check()
        record, replayed = await steps.tool(step, index, tool, answer)
        if record.result.is_error and not replayed:
            notify.tool_failed(session_id, run_id, step, tool, record.result.content)
        return record, replayed

    async def settle(
        step: int, index: int, tool: ToolCall, record: ToolRecord, replayed: bool
    ) -> tuple[ToolRecord, bool]:
        if record.result.pending is None:
            return record, replayed
        asking = not replayed and options.wait_for is not None
        if not replayed:
            request = asked(session_id, step, index, tool, record)
            answer = notify.answer_command(options.wait_for, session_id, run_id)
            notify.suspension_requested(session_id, run_id, request, answer)
            if asking:  # the run waits for its answer (a pause, a suspension, an event): listed as waiting
                status = SessionStatus(state="waiting", flow_run_id=run_id, updated=_now(), request=request)
                await write_status(session_id, status)
        settled = await settle_call(live, steps, step, index, tool, record, call)
        if asking:
            await write_status(session_id, SessionStatus(state="running", flow_run_id=run_id, updated=_now()))
        return settled, replayed

    async def call_and_settle(step: int, index: int, tool: ToolCall) -> tuple[ToolRecord, bool]:
        record, replayed = await call(step, index, tool)
        return await settle(step, index, tool, record, replayed)

    holding = False  # the session's artifacts are the holder's: a refused run must not replace them

    async def ended(outcome: RunResult) -> None:
        """The run's artifacts and event, whichever way it ended."""
        if holding:
            async with anyio.create_task_group() as group:
                group.start_soon(publish, outcome, steps.entries)
                group.start_soon(progress.finish, outcome)
        notify.run_ended(outcome)

    def finish(outcome: RunResult) -> None:
        """The run's artifacts and event go out while Prefect records the flow run's final
        state (two round trips at once cost one); ``Client.run`` awaits them before it
        returns. They start once the lease is let go: the server deletes a lock by reading it
        and then writing, and on SQLite another write in between makes it answer 503."""
        live.finishing.append(asyncio.create_task(ended(outcome)))

    async def remember(kind: str, inputs: dict[str, object], produce: Callable[[], Awaitable[str]]) -> tuple[str, bool]:
        key = step_key(session_id, 0, kind, 0, inputs)
        task = steps.configured(remembered, options.task_config.wait)
        state = await task(session_id, kind, key, quote(produce), return_state=True)
        value, replayed = str(await state.aresult()), state.name == "Cached"
        check_stored(kind, key, replayed)
        return value, replayed

    try:
        async with session_lease(session_id, run_id) as lease, interruptible(session_id, run_id):
            holding = True
            await _take(session_id, run_id, inputs, live)
            try:
                if live.answered is not None:
                    await _mark_answered(live.answered, run_id)
                record = live.record if live.record is not None else await _inputs(session_id, inputs, prompt)
                spends_from = await _budget(session_id, options)
                state.messages = opening_messages(
                    record.prompt, options.system_prompt, toolkit.instructions, record.history
                )
                async with live.transport(logger.info) as transport, AsyncExitStack() as opened:

                    async def begin(transport: ModelTransport, name: str = "") -> None:
                        """An ACP transport opens or resumes its session (a fallback's under its own name)."""
                        if not isinstance(transport, SessionTransport):
                            return
                        if not name:
                            await transport.begin(remember, toolkit.specs())
                            return

                        async def remember_as(kind: str, inputs: dict[str, object], produce: Any) -> tuple[str, bool]:
                            return await remember(f"{name}-{kind}", inputs, produce)

                        await transport.begin(remember_as, toolkit.specs())

                    fallbacks = (
                        Fallbacks(live.fallbacks, opened, logger.info, begin)
                        if options.on_quota == "fallback" and live.fallbacks
                        else None
                    )
                    steps.model = TurnRuntime(
                        transport=transport,
                        before_llm=options.before_llm,
                        after_llm=options.after_llm,
                        run_tool=call_and_settle,
                        emit=live.emit,
                        limit=options.subscription,
                        retries=options.model_retries,
                        retry_wait=options.model_retry_wait,
                        budget=spends_from,
                        fallbacks=fallbacks,
                        quota_spent=quota_spent,
                        quota_wait=options.quota_wait,
                    )
                    await begin(transport)
                    text = await drive(
                        state,
                        tools=toolkit.specs(),
                        model=options.model,
                        max_turns=options.max_turns,
                        run_turn=turn,
                        run_tool=call,
                        settle=settle,
                        emit=live.emit,
                        output=OutputSpec.of(options.output_type),
                        output_retries=options.output_retries,
                        max_tool_calls=options.max_tool_calls,
                        max_parallel_tool_calls=options.max_parallel_tool_calls,
                    )
                    await synced(session_id, ending=True)  # the last steps' records are on disk before the run says so
                outcome = result("completed", text=text, output=text if options.output_type is str else state.output)
            except Exception as exc:
                with anyio.CancelScope(shield=True):
                    await _left(session_id, run_id, state, exc, inputs, live.record)
                raise
            if record.conversation_id is not None:
                kept: list[Message] = [message for message in state.messages if not isinstance(message, SystemMessage)]
                await (options.conversation_store or StorageConversationStore()).save(record.conversation_id, kept)
            await write_status(session_id, _status(outcome))
    except Exception as exc:
        waiting = unwrap(exc)
        if isinstance(waiting, SessionTakenOverError):
            holding = False
        try:
            await synced(session_id, ending=True)
        except StorageError as unsynced:  # the run ends as it was going to; a resume runs that step again
            if str(unsynced) != str(waiting):
                logger.warning("%s", unsynced)
        if isinstance(waiting, Suspended):
            logger.info(
                "run pending: %s (request %s); answer with: %s",
                redact(waiting.request.prompt),
                waiting.request.id,
                notify.answer_command(None, session_id, run_id),
            )
            outcome = result("pending", request=waiting.request)
            finish(outcome)
            # A Paused-type state: Prefect's filters, dashboards and UI count the run as waiting,
            # not done. It never times out and is not Prefect's to resume: answering the
            # request resumes the session in a new flow run, which marks this one Answered.
            waiting_is_no_error()
            return Paused(name=AWAITING, message=redact(str(waiting)), data=quote(outcome))  # type: ignore[return-value]
        if isinstance(waiting, AuthRequired):  # from a turn, or from the ACP session/new before the first
            notify.auth_required(session_id, run_id, waiting)
        if isinstance(waiting, TransientError):  # a turn that gave up wrote no record: its attempts count here
            state.metrics.launches += waiting.launches
            state.metrics.model_retries += waiting.model_retries
        failure = PrefectApiError(waiting) if is_transient(waiting) else waiting
        error = describe(failure)
        if quiet.expected(failure) and not quiet.debugging():  # one line: the caller's (see .quiet)
            if flow_run.flow_name == agent_run.name:  # its own flow run, not a caller's (``subflow=False``)
                quiet.failed_quietly(run_id)
            logger.warning("run failed: %s", error, extra=quiet.UI_ONLY)
        else:
            traceback = quiet.debugging() or not quiet.expected(waiting)
            logger.error("run failed: %s", error, exc_info=exc if traceback else None)
        outcome = result("failed", error=error, error_type=type(failure).__name__)
        finish(outcome)
        return Failed(message=outcome.error, data=quote(outcome))  # type: ignore[return-value]
    finish(outcome)
    return quote(outcome)


def _now() -> datetime:
    return datetime.now(UTC)


def _status(outcome: RunResult) -> SessionStatus:
    state = "waiting" if outcome.status == "pending" else outcome.status
    paid = outcome.metrics.usage + outcome.metrics.replayed_usage
    return SessionStatus(
        state=state,
        flow_run_id=outcome.flow_run_id or "",
        updated=_now(),
        turns=outcome.metrics.turns,
        tool_calls=outcome.metrics.tool_calls,
        request=outcome.request,
        error=outcome.error,
        cost_usd=paid.cost_usd,
        tokens=paid.tokens,
    )


async def _budget(session_id: str, options: ClientOptions) -> Holder | None:
    """The budget this run spends from: its own, stored with its session (a resumed run and
    the runs nested in it find it there), else the nearest one of the runs it is nested in."""
    return await spends_from(session_id, options.budget)


async def _take(session_id: str, run_id: str, reference: str | None, live: LiveRun) -> None:
    """What the run keeps of its session, written once it holds it and never before: its
    inputs, its state, its link to the run it is nested in, the caller's own records (the
    command's invocation) and its status. A start that is refused writes none of them."""
    record = live.record
    writes: list[Awaitable[object]] = [
        write_status(session_id, SessionStatus(state="running", flow_run_id=run_id, updated=_now()))
    ]
    if record is not None and reference is not None:
        state = SessionState(inputs=reference, conversation_id=record.conversation_id)
        writes += [write_inputs(session_id, record), SessionStore().save(session_id, state)]
    if live.nesting is not None:
        writes.append(write_nesting(session_id, live.nesting))
    writes += [write() for write in live.on_held]
    async with anyio.create_task_group() as group:
        for write in writes:
            group.start_soon(_awaited, write)


async def _awaited(write: Awaitable[object]) -> None:
    await write


async def _left(
    session_id: str,
    run_id: str,
    state: LoopState,
    exc: Exception,
    reference: str | None,
    record: SessionRecord | None,
) -> None:
    """The session's status as a run that raised leaves it, written while it still holds the
    session (a run that took it over writes its own), and, for a run that ends waiting, what
    it waits for (``client.resume`` and ``nexusflow answer`` read it). A status that cannot be
    written is logged: the run's own error is what it reports; a request that cannot be stored
    fails the run (a run left pending that nothing can answer would be lost)."""
    error = unwrap(exc)
    if isinstance(error, SessionTakenOverError):
        return
    waiting = error.request if isinstance(error, Suspended) else None
    if waiting is not None and reference is not None:
        conversation = record.conversation_id if record is not None else None
        pending = SessionState(inputs=reference, conversation_id=conversation, pending=waiting, waiting=run_id)
        await SessionStore().save(session_id, pending)
    status = SessionStatus(
        state="waiting" if waiting is not None else "failed",
        flow_run_id=run_id,
        updated=_now(),
        turns=state.metrics.turns,
        tool_calls=state.metrics.tool_calls,
        request=waiting,
        error=None if waiting is not None else describe(error),
    )
    try:
        await write_status(session_id, status)
    except Exception as unwritten:
        get_run_logger().warning("%s", describe(unwritten))


async def _mark_answered(waiting: str, run_id: str) -> None:
    """The flow run that ended waiting is done waiting: Completed, named ``Answered``. A
    failure to say so is logged; it is no failure of the run that goes on."""
    try:
        async with get_client() as client:
            await client.set_flow_run_state(
                UUID(waiting),
                Completed(name=ANSWERED, message=f"answered: the session goes on in flow run {run_id}"),
                force=True,
            )
    except Exception as exc:
        get_run_logger().warning("flow run %s stays %s: %s", waiting, AWAITING, describe(exc))


async def _inputs(session_id: str, reference: str | None, prompt: str) -> SessionRecord:
    """The run's prompt and history, stored by ``Client.run`` under ``reference``; a flow
    started by hand with only a prompt runs that prompt."""
    if reference is None:
        return SessionRecord(prompt=prompt)
    record = await read_inputs(session_id, reference)
    if record is None:
        raise storage_inputs_missing(reference, session_id)
    return record


AgentRun = Flow[[str, str, str | None, LiveRun | None], Coroutine[Any, Any, quote]]
"""``agent_run``'s type: its parameters and the quoted result it returns."""

_storing_in: dict[UUID, AgentRun] = {}


def agent_run_storing_in(storage: WritableFileSystem) -> AgentRun:
    """``agent_run`` with its result storage named (a block saved on the server, as
    ``step_storage`` gives it). Without one, Prefect asks the server for its default storage
    twice at each start, each time through a new HTTP client: two requests, and two TLS
    contexts built for a plain-HTTP API, in every run. Made once per storage block."""
    document = storage._block_document_id
    if document is None:
        return agent_run
    found = _storing_in.get(document)
    if found is None:
        found = _storing_in[document] = agent_run.with_options(result_storage=storage)
    return found
