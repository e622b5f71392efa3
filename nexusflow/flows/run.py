"""``AgentRun``: one run of the ``agent_run`` flow as an object, so that each part of it (a
turn, a tool call, settling a suspended call, the run's end) is a method a test can drive
without a flow around it, and each collaborator is there from the moment it is made.

A run has two lives. ``AgentRun`` is made when the flow starts: it owns what the run's end
reports whatever happened (the transcript so far, the step table, the progress artifact).
``HeldRun`` is made once the run holds its session and its transport is open: it owns the
lease, the turn's live objects and the budget, which exist only from then on. Nothing is
patched into either after it is made."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from functools import partial
from logging import Logger, LoggerAdapter
from typing import Any, Literal
from uuid import UUID

import anyio
from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.runtime import flow_run
from prefect.states import Completed, Failed, Paused
from prefect.utilities.annotations import quote
from pydantic_core import to_jsonable_python

from .._prefect.retry import is_transient
from .._prefect.session_lock import SessionLease, session_lease
from .._prefect.storage import synced
from .._support.secrets import redact
from ..config.options import ClientOptions
from ..config.output import OutputSpec
from ..config.waits import waiting_is_no_error
from ..errors import (
    AuthRequired,
    PrefectApiError,
    QuotaExhausted,
    SessionTakenOverError,
    StorageError,
    TransientError,
    describe,
    unwrap,
)
from ..messages import Answer, Message, ModelRequest, RunResult, SystemMessage, ToolCall
from ..state.budget import Holder, spends_from
from ..state.store import (
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
from ..state.suspension import Suspended
from ..tasks import ToolRecord, ToolRuntime, TurnRecord, TurnRuntime, check_stored, remembered
from ..tasks.keys import step_key
from ..tasks.live_run import LiveRun
from ..transports import ModelTransport, SessionTransport
from ..transports.fallback import Fallbacks
from . import notify, quiet
from .errors import storage_inputs_missing
from .interrupt import SETTLE_WITHIN, cancelling, interruptible
from .loop import LoopState, drive, opening_messages
from .report import Progress, publish
from .steps import Steps, asked
from .steps import settle as settle_call
from .subscription import reset_of, wait_until

FLOW_NAME = "agent_run"
"""The flow's name: a failure is said quietly only in a flow run of its own (``subflow=False``
runs it inside the caller's)."""
AWAITING = "AwaitingAnswer"
"""The Paused-type state of a flow run that ended waiting for an answer."""
ANSWERED = "Answered"
"""The Completed-type state it is moved to when its session goes on with the answer."""

RunLogger = Logger | LoggerAdapter[Logger]
"""What ``get_run_logger`` gives: the run's logs go to its flow run in the UI."""

Ended = quote | State[Any]
"""What the flow returns: for a run that completed, its ``RunResult`` quoted (Prefect types
``quote`` without its value's type); for one that waits for an answer, a ``Paused`` state
named ``AwaitingAnswer``; for one that failed, a ``Failed`` state. Both states carry the
quoted ``RunResult`` as their data."""


def tool_runtime(live: LiveRun) -> ToolRuntime:
    """How the run's tool calls run: the toolkit under the client's policies and hooks."""
    options = live.options
    return ToolRuntime(
        toolkit=live.toolkit,
        policies=options.policies,
        before_tool=options.before_tool,
        after_tool=options.after_tool,
        max_result=options.max_tool_result,
        max_depth=options.max_argument_depth,
    )


class AgentRun:
    """One run of a session, from its flow's start to the state the flow ends in. ``steps``
    is given (the flow makes it, with the run's tool runtime and step storage); the
    transcript, the metrics and the progress artifact start empty here."""

    def __init__(self, session_id: str, run_id: str, live: LiveRun, steps: Steps, logger: RunLogger) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self.live = live
        self.options = live.options
        self.steps = steps
        self.logger = logger
        self.state = LoopState([])
        self.progress = Progress(session_id, self.options.max_turns)
        self.holding = False
        """Whether the run holds its session: the session's artifacts are the holder's, so a
        refused run, or one another run took the session from, must not replace them."""

    def result(self, status: Literal["completed", "pending", "failed"], **fields: Any) -> RunResult:
        return RunResult(
            status=status,
            messages=self.state.messages,
            metrics=self.state.metrics,
            session_id=self.session_id,
            flow_run_id=self.run_id,
            **fields,
        )

    def quota_spent(self, exc: QuotaExhausted, then: str, fails: bool = False) -> None:
        """Announced and logged; a run that fails says so in the UI only: its caller says it (see ``quiet``)."""
        self.logger.warning("%s; %s", exc, then, extra=quiet.UI_ONLY if fails else None)
        notify.quota_exhausted(self.session_id, self.run_id, exc, self.options.on_quota, then)

    async def left_for_the_reset(self, shown: str) -> None:
        status = SessionStatus(
            state="waiting", flow_run_id=self.run_id, updated=_now(), waits_for=f"quota reset at {shown}"
        )
        await write_status(self.session_id, status)

    async def held(self, prompt: str, inputs: str | None) -> RunResult:
        """The run in its held session: its inputs taken, its transport open, the loop driven
        to the final answer, its conversation and status written. A run that raises leaves
        the session's status (``_left``) before it lets the session go."""
        session_id, options, live = self.session_id, self.options, self.live
        async with session_lease(session_id, self.run_id) as lease, interruptible(session_id, self.run_id):
            self.holding = True
            await _take(session_id, self.run_id, inputs, live)
            try:
                if live.answered is not None:
                    await _mark_answered(live.answered, self.run_id)
                record = live.record if live.record is not None else await _inputs(session_id, inputs, prompt)
                budget = await _budget(session_id, options)
                self.state.messages = opening_messages(
                    record.prompt, options.system_prompt, live.toolkit.instructions, record.history
                )
                async with live.transport(self.logger.info) as transport, AsyncExitStack() as opened:
                    text = await HeldRun(self, lease, transport, opened, budget).drive()
                    await synced(session_id, ending=True)  # the last steps' records are on disk before the run says so
                outcome = self.result(
                    "completed", text=text, output=text if options.output_type is str else self.state.output
                )
            except Exception as exc:
                with anyio.CancelScope(shield=True):
                    await _left(session_id, self.run_id, self.state, exc, inputs, live.record)
                raise
            except BaseException:
                if cancelling():
                    with anyio.CancelScope(shield=True):
                        await _left_cancelled(session_id, self.run_id, self.state)
                raise
            if record.conversation_id is not None:
                kept: list[Message] = [m for m in self.state.messages if not isinstance(m, SystemMessage)]
                await (options.conversation_store or StorageConversationStore()).save(record.conversation_id, kept)
            await write_status(session_id, _status(outcome))
        return outcome

    async def ended_by(self, exc: Exception) -> State[Any]:
        """The state of a run that raised: ``AwaitingAnswer`` (Paused-type) for one that waits
        for an answer, ``Failed`` for any other, each with the run's result as its data."""
        error = unwrap(exc)
        if isinstance(error, SessionTakenOverError):
            self.holding = False
        try:
            await synced(self.session_id, ending=True)
        except StorageError as unsynced:  # the run ends as it was going to; a resume runs that step again
            if str(unsynced) != str(error):
                self.logger.warning("%s", unsynced)
        if isinstance(error, Suspended):
            self.logger.info(
                "run pending: %s (request %s); answer with: %s",
                redact(error.request.prompt),
                error.request.id,
                notify.answer_command(None, self.session_id, self.run_id),
            )
            outcome = self.result("pending", request=error.request)
            self.finish(outcome)
            # A Paused-type state: Prefect's filters, dashboards and UI count the run as waiting,
            # not done. It never times out and is not Prefect's to resume: answering the
            # request resumes the session in a new flow run, which marks this one Answered.
            waiting_is_no_error()
            return Paused(name=AWAITING, message=redact(str(error)), data=quote(outcome))
        if isinstance(error, AuthRequired):  # from a turn, or from the ACP session/new before the first
            notify.auth_required(self.session_id, self.run_id, error)
        if isinstance(error, TransientError):  # a turn that gave up wrote no record: its attempts count here
            self.state.metrics.launches += error.launches
            self.state.metrics.model_retries += error.model_retries
        failure = PrefectApiError(error) if is_transient(error) else error
        described = describe(failure)
        if quiet.expected(failure) and not quiet.debugging():  # one line: the caller's (see .quiet)
            if flow_run.flow_name == FLOW_NAME:  # its own flow run, not a caller's (``subflow=False``)
                quiet.failed_quietly(self.run_id)
            self.logger.warning("run failed: %s", described, extra=quiet.UI_ONLY)
        else:
            traceback = quiet.debugging() or not quiet.expected(error)
            self.logger.error("run failed: %s", described, exc_info=exc if traceback else None)
        outcome = self.result("failed", error=described, error_type=type(failure).__name__)
        self.live.failure = failure
        self.finish(outcome, failure)
        return Failed(message=outcome.error, data=quote(outcome))

    def finish(self, outcome: RunResult, failure: BaseException | None = None) -> quote:
        """The run's artifacts and event go out while Prefect records the flow run's final
        state (two round trips at once cost one); ``Client.run`` awaits them before it
        returns. They start once the lease is let go: the server deletes a lock by reading it
        and then writing, and on SQLite another write in between makes it answer 503."""
        self.live.finishing.append(asyncio.create_task(self._ended(outcome, failure)))
        return quote(outcome)

    async def _ended(self, outcome: RunResult, failure: BaseException | None) -> None:
        """The run's artifacts and event, whichever way it ended."""
        if self.holding:
            async with anyio.create_task_group() as group:
                group.start_soon(publish, outcome, self.steps.entries)
                group.start_soon(self.progress.finish, outcome)
        notify.run_ended(outcome, failure)


class HeldRun:
    """The run once it holds its session and its transport is open: a turn, a tool call and
    settling a suspended call, each checking first that the session is still its own. The
    turn's live objects (``model``) are made here, with this run's tool call for an agent
    that calls tools during its turn (ACP)."""

    def __init__(
        self,
        run: AgentRun,
        lease: SessionLease,
        transport: ModelTransport,
        opened: AsyncExitStack,
        budget: Holder | None,
    ) -> None:
        options, live = run.options, run.live
        self.run = run
        self.lease = lease
        self.transport = transport
        fallbacks = (
            Fallbacks(live.fallbacks, opened, run.logger.info, self.begin)
            if options.on_quota == "fallback" and live.fallbacks
            else None
        )
        self.model = TurnRuntime(
            transport=transport,
            before_llm=options.before_llm,
            after_llm=options.after_llm,
            run_tool=self.call_and_settle,
            emit=live.emit,
            limit=options.subscription,
            retries=options.model_retries,
            retry_wait=options.model_retry_wait,
            budget=budget,
            fallbacks=fallbacks,
            quota_spent=run.quota_spent,
            quota_wait=options.quota_wait,
        )

    async def drive(self) -> str:
        """The transport's session begun (ACP), the loop run to its final answer."""
        run, options = self.run, self.run.options
        await self.begin(self.transport)
        return await drive(
            run.state,
            tools=run.live.toolkit.specs(),
            model=options.model,
            max_turns=options.max_turns,
            run_turn=self.turn,
            run_tool=self.call,
            settle=self.settle,
            emit=run.live.emit,
            output=OutputSpec.of(options.output_type),
            output_retries=options.output_retries,
            max_tool_calls=options.max_tool_calls,
            max_parallel_tool_calls=options.max_parallel_tool_calls,
        )

    async def turn(self, step: int, request: ModelRequest) -> tuple[TurnRecord, bool]:
        """Ask the model (or replay its stored answer); a spent quota with a known reset waits for it."""
        run = self.run
        await self.lease.check()
        while True:
            try:
                record, replayed = await run.steps.turn(step, request, self.model)
                break
            except QuotaExhausted as exc:
                until = reset_of(exc, run.options)
                if until is None:
                    run.quota_spent(exc, "the run fails", fails=True)
                    raise
                shown = until.isoformat(timespec="seconds")
                run.quota_spent(exc, f"the run waits until {shown}, then asks again")
                await run.progress.waiting(step, shown)
                await wait_until(until, partial(run.left_for_the_reset, shown))
        if replayed:  # a live turn logs what it decided in its own task run
            calls = ", ".join(call.name for call in record.reply.tool_calls)
            run.logger.info("turn %d replayed: %s", step, f"calls {calls}" if calls else "final answer")
        await run.progress.turn_done(step + 1)
        return record, replayed

    async def call(
        self, step: int, index: int, tool: ToolCall, answer: Answer | None = None
    ) -> tuple[ToolRecord, bool]:
        """A call (or, with ``answer``, its approved run): a live one that fails is announced."""
        run = self.run
        await self.lease.check()
        record, replayed = await run.steps.tool(step, index, tool, answer)
        if record.result.is_error and not replayed:
            notify.tool_failed(run.session_id, run.run_id, step, tool, record.result.content)
        return record, replayed

    async def settle(
        self, step: int, index: int, tool: ToolCall, record: ToolRecord, replayed: bool
    ) -> tuple[ToolRecord, bool]:
        """A suspended call asked about and settled (its answer found, awaited, or the run
        suspended); any other call passes as it is."""
        if record.result.pending is None:
            return record, replayed
        run = self.run
        session_id, run_id, wait_for = run.session_id, run.run_id, run.options.wait_for
        asking = not replayed and wait_for is not None
        if not replayed:
            request = asked(session_id, step, index, tool, record)
            answer = notify.answer_command(wait_for, session_id, run_id)
            notify.suspension_requested(session_id, run_id, request, answer)
            if asking:  # the run waits for its answer (a pause, a suspension, an event): listed as waiting
                status = SessionStatus(state="waiting", flow_run_id=run_id, updated=_now(), request=request)
                await write_status(session_id, status)
        settled = await settle_call(run.live, run.steps, step, index, tool, record, self.call)
        if asking:
            await write_status(session_id, SessionStatus(state="running", flow_run_id=run_id, updated=_now()))
        return settled, replayed

    async def call_and_settle(self, step: int, index: int, tool: ToolCall) -> tuple[ToolRecord, bool]:
        record, replayed = await self.call(step, index, tool)
        return await self.settle(step, index, tool, record, replayed)

    async def remember(
        self, kind: str, inputs: dict[str, object], produce: Callable[[], Awaitable[str]]
    ) -> tuple[str, bool]:
        """A value the transport keeps across runs (an ACP agent's session id), as a keyed task."""
        run = self.run
        key = step_key(run.session_id, 0, kind, 0, inputs)
        task = run.steps.configured(remembered, run.options.task_config.wait)
        state = await task(run.session_id, kind, key, quote(produce), return_state=True)
        value, replayed = str(await state.aresult()), state.name == "Cached"
        check_stored(kind, key, replayed)
        return value, replayed

    async def begin(self, transport: ModelTransport, name: str = "") -> None:
        """An ACP transport opens or resumes its session (a fallback's under its own name)."""
        if not isinstance(transport, SessionTransport):
            return
        if not name:
            await transport.begin(self.remember, self.run.live.toolkit.specs())
            return

        async def remember_as(kind: str, inputs: dict[str, object], produce: Any) -> tuple[str, bool]:
            return await self.remember(f"{name}-{kind}", inputs, produce)

        await transport.begin(remember_as, self.run.live.toolkit.specs())


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
        text=outcome.text,
        output=None if isinstance(outcome.output, str) else to_jsonable_python(outcome.output),
        usage=paid,
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


async def _left_cancelled(session_id: str, run_id: str, state: LoopState) -> None:
    """The session's status as an interrupted or cancelled run leaves it: ``cancelled``, not
    ``running`` (which ``sessions`` would take for a crash once the lock is gone). Bounded: the
    process is on its way out; a status not written leaves ``running``, read as crashed."""
    status = SessionStatus(
        state="cancelled",
        flow_run_id=run_id,
        updated=_now(),
        turns=state.metrics.turns,
        tool_calls=state.metrics.tool_calls,
    )
    try:
        with anyio.fail_after(SETTLE_WITHIN):
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
