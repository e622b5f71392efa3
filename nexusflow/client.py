"""The client: a transport plus the options every client shares, and ``run``."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypedDict, TypeVar, Unpack, overload

import anyio
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext, TaskRunContext
from prefect.transactions import CommitMode, atransaction, get_transaction
from prefect.utilities.annotations import quote
from prefect.utilities.asyncutils import run_coro_as_sync

from ._prefect.clients import run_clients
from ._prefect.retry import FailedOnTheApi, api_retrying, is_transient
from ._prefect.server import logger, use_server
from ._prefect.storage import step_storage
from .compose import PROMPT_DESCRIPTION, AgentTool, map_prompts
from .config._checks import build, check_session_id, function, text, texts
from .config.errors import argument_wrong, option_refused
from .config.hooks import AfterLlm, AfterTool, BeforeLlm, BeforeTool
from .config.options import ClientOptions, WaitFor
from .config.output import OutputSpec
from .config.policies import ToolPolicy
from .config.settings import OnQuota, settings
from .config.subscription import SubscriptionLimit
from .config.task_config import TaskConfig
from .errors import (
    PrefectApiError,
    StorageError,
    describe,
    resume_not_waiting,
    resume_other_answer,
    resume_unknown_session,
    run_outside_a_flow,
    unwrap,
)
from .flows import agent_run, agent_run_storing_in, interrupt
from .flows.agent import preview
from .messages import Answer, OutputT, RunResult
from .state._position import child_session_id
from .state.budget import spends_from
from .state.events import Emit, RunFinished, StreamEvent
from .state.store import (
    ConversationStore,
    Nesting,
    SessionRecord,
    SessionStore,
    StorageConversationStore,
    inputs_reference,
    nested_in,
    nesting_here,
    read_inputs,
    taken_nesting,
)
from .tasks.live_run import LiveRun, bound, taken_writes
from .toolkit import Toolkit
from .transports import Generate, TransportFactory, in_process_transport

RunT = TypeVar("RunT")
"""A run's own output type, given to one call."""
T = TypeVar("T")

RUN_ATTEMPTS = 4
"""Starts of a run that the Prefect API's passing trouble failed, the first included."""
STARTS_AGAIN = (
    "session %s: the Prefect API failed the run (%s); it starts again from its finished steps (start %d of %d)"
)
"""The one line a run started again says: its failed flow run is in the UI beside the new one."""


@dataclass(frozen=True)
class _Stopped:
    """A Ctrl-C or an exit caught in the event loop, to raise in the caller's thread."""

    raised: KeyboardInterrupt | SystemExit


async def _stops_caught(coroutine: Coroutine[Any, Any, T]) -> T | _Stopped:
    try:
        return await coroutine
    except (KeyboardInterrupt, SystemExit) as exc:
        return _Stopped(exc)


def _as_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """``run_coro_as_sync``, with Ctrl-C and an exit (a tool may raise them) raised as
    themselves in the caller's thread: raised in Prefect's run-sync event loop, which every
    sync call of the process shares, they would stop that loop's thread."""
    with interrupt.relayed():
        outcome: T | _Stopped = run_coro_as_sync(_stops_caught(coroutine))
    if isinstance(outcome, _Stopped):
        raise outcome.raised
    return outcome


def new_session_id() -> str:
    return uuid.uuid4().hex


def exchange_session_id(conversation_id: str, exchange: int) -> str:
    """The session of one exchange of a conversation: ``<id>.<n>``, shortened with a digest
    of the id when that would pass the 128 characters every accepted id must fit."""
    return child_session_id(conversation_id, exchange)


@asynccontextmanager
async def _committed_as_they_finish() -> AsyncIterator[None]:
    """Inside a transaction (a task run's: a user's @task, a tool that runs an agent), Prefect
    stores the steps' records only when it ends, so a crash would lose every finished turn.
    Committed eagerly, each step is stored as it finishes, as in a run of its own. Elsewhere
    no transaction is opened: one costs CPU on every turn and tool call (``benchmarks/README.md``)."""
    if get_transaction() is None:
        yield
        return
    async with atransaction(commit_mode=CommitMode.EAGER):
        yield


@contextmanager
def _its_own_result_setting() -> Iterator[None]:
    """A run started inside a task run (a tool that runs an agent, a user's @task) keeps its
    flow's ``persist_result=False``: Prefect reads the calling task's setting first, and would
    write the sub-agent's result to a record under a random key at the storage's root, that
    nothing names and ``prune`` cannot find. Its steps are stored as nexusflow's records."""
    task = TaskRunContext.get()
    if task is None or not task.persist_result:
        yield
        return
    with task.model_copy(update={"persist_result": False}):
        yield


def _toolkit(where: str, toolkit: object) -> None:
    if toolkit is not None and not isinstance(toolkit, Toolkit):
        raise argument_wrong(where, "toolkit", "a Toolkit (Toolkit([...]) or await Toolkit.load(...)) or None", toolkit)


def _unquoted(value: object) -> object:
    return value.unwrap() if isinstance(value, quote) else value


class Client(Generic[OutputT]):
    """Runs agent runs. Build one with ``create_in_process_client`` (or, for an agent CLI,
    ``create_cli_client``); every client has the same ``run``. A client made with an
    ``output_type`` is a ``Client[ThatType]``: its runs' ``RunResult.output`` is typed so."""

    def __init__(self, transport: TransportFactory, options: ClientOptions, name: str = "in-process") -> None:
        self.transport = transport
        self.options = options
        self.name = name
        """Who answers (a CLI's style, or ``in-process``): what a turn a fallback answered names."""

    def with_options(self, **options: Unpack[OptionsUpdate]) -> Client[OutputT]:
        """This client with some options changed, for a run or a few, checked as the client's
        own were: ``client.with_options(max_cost_usd=0.5).run(...)`` gives that run its own
        budget. The client itself is unchanged."""
        merged = {name: getattr(self.options, name) for name in ClientOptions.model_fields} | dict(options)
        model, subscription, output_type = merged.pop("model"), merged.pop("subscription"), merged.pop("output_type")
        checked = client_options("with_options", model, subscription, output_type, merged)
        return Client(self.transport, checked, self.name)

    @overload
    async def run(
        self,
        prompt: str,
        toolkit: Toolkit | None = None,
        *,
        session_id: str | None = None,
        subflow: bool = True,
        output_type: None = None,
    ) -> RunResult[OutputT]: ...

    @overload
    async def run(
        self,
        prompt: str,
        toolkit: Toolkit | None = None,
        *,
        session_id: str | None = None,
        subflow: bool = True,
        output_type: type[RunT],
    ) -> RunResult[RunT]: ...

    @overload
    async def run(
        self,
        prompt: str,
        toolkit: Toolkit | None = None,
        *,
        session_id: str | None = None,
        subflow: bool = True,
        output_type: object,
    ) -> RunResult[Any]: ...

    async def run(
        self,
        prompt: str,
        toolkit: Toolkit | None = None,
        *,
        session_id: str | None = None,
        subflow: bool = True,
        output_type: object = None,
    ) -> RunResult[Any]:
        """Run the ``agent_run`` flow (a subflow when called inside a flow) and return its
        result. Failures are reported in the result (``status="failed"``, ``error``),
        not raised. Run again with the same ``session_id`` to resume a crashed run; a run
        that ends ``pending`` goes on with ``resume``.

        ``subflow=False`` (inside a flow only) runs the loop in the current flow run
        instead: its turns and tool calls are that run's task runs, and a
        ``DeploymentSuspension`` suspends that run (a deployment's run, say).

        ``output_type`` (default: the client's) is what the final answer must be: a pydantic
        model or any type a ``TypeAdapter`` takes; ``result.output`` is the validated value.
        ``str`` asks for plain text."""
        return await self._start(
            SessionRecord(prompt=text("run", "prompt", prompt)),
            toolkit,
            session_id,
            subflow=subflow,
            output_type=output_type,
        )

    @overload
    async def resume(
        self,
        session_id: str,
        answer: Answer,
        toolkit: Toolkit | None = None,
        *,
        subflow: bool = True,
        output_type: None = None,
    ) -> RunResult[OutputT]: ...

    @overload
    async def resume(
        self,
        session_id: str,
        answer: Answer,
        toolkit: Toolkit | None = None,
        *,
        subflow: bool = True,
        output_type: type[RunT],
    ) -> RunResult[RunT]: ...

    @overload
    async def resume(
        self,
        session_id: str,
        answer: Answer,
        toolkit: Toolkit | None = None,
        *,
        subflow: bool = True,
        output_type: object,
    ) -> RunResult[Any]: ...

    async def resume(
        self,
        session_id: str,
        answer: Answer,
        toolkit: Toolkit | None = None,
        *,
        subflow: bool = True,
        output_type: object = None,
    ) -> RunResult[Any]:
        """Continue a ``pending`` run with the answer to its request, in this process or
        any other: finished steps replay, the answered call runs, the run goes on. The answer
        is for that one call with its arguments, and is used once: the session then no longer
        waits for it. ``output_type`` (default: the client's) is not stored with the session:
        pass the one the run started with, or its final answer is checked against another.
        ``subflow`` as for ``run``."""
        check_session_id(session_id, "resume")
        if not isinstance(answer, Answer):
            raise argument_wrong("resume", "answer", "an Answer (Answer(id=request.id, ok=True))", answer)
        _toolkit("resume", toolkit)
        use_server()
        state = await self._sessions.get(session_id)
        record = await read_inputs(session_id, state.inputs) if state is not None else None
        if state is None or record is None:
            raise resume_unknown_session(session_id, self._sessions.where)
        if state.pending is None:
            raise resume_not_waiting(session_id)
        if answer.id != state.pending.id:
            raise resume_other_answer(answer.id, session_id, state.pending.id)
        record = record.model_copy(update={"conversation_id": state.conversation_id})
        return await self._start(
            record,
            toolkit,
            session_id,
            answers={bound(state.pending): answer},
            answered=state.waiting,
            subflow=subflow,
            output_type=output_type,
        )

    @overload
    async def ask(
        self, prompt: str, toolkit: Toolkit | None = None, *, conversation_id: str, output_type: None = None
    ) -> RunResult[OutputT]: ...

    @overload
    async def ask(
        self, prompt: str, toolkit: Toolkit | None = None, *, conversation_id: str, output_type: type[RunT]
    ) -> RunResult[RunT]: ...

    @overload
    async def ask(
        self, prompt: str, toolkit: Toolkit | None = None, *, conversation_id: str, output_type: object
    ) -> RunResult[Any]: ...

    async def ask(
        self, prompt: str, toolkit: Toolkit | None = None, *, conversation_id: str, output_type: object = None
    ) -> RunResult[Any]:
        """One exchange of a conversation that goes on across runs and processes: the
        earlier messages come from the conversation store and the new ones are saved.
        ``output_type`` (default: the client's) is this exchange's, as for ``run``."""
        check_session_id(conversation_id, "ask", "conversation_id")
        text("ask", "prompt", prompt)
        _toolkit("ask", toolkit)
        use_server()
        history = await self._conversations.get(conversation_id)
        exchange = sum(message.role == "user" for message in history)
        record = SessionRecord(prompt=prompt, history=history, conversation_id=conversation_id)
        session_id = exchange_session_id(conversation_id, exchange)
        with nested_in(Nesting(parent=conversation_id, kind="exchange")):
            return await self._start(record, toolkit, session_id, output_type=output_type)

    async def stream(
        self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None
    ) -> AsyncIterator[StreamEvent]:
        """``run``, yielding events as it goes: text chunks, thoughts, tool calls and their
        results, and last ``RunFinished`` with the result."""
        record = SessionRecord(prompt=text("stream", "prompt", prompt))
        _toolkit("stream", toolkit)
        if session_id is not None:
            check_session_id(session_id, "stream")
        send, receive = anyio.create_memory_object_stream[StreamEvent](math.inf)

        async def produce() -> None:
            async with send:
                result = await self._start(record, toolkit, session_id, emit=send.send_nowait)
                send.send_nowait(RunFinished(result=result))

        async with anyio.create_task_group() as group:
            group.start_soon(produce)
            async with receive:
                async for event in receive:
                    yield event

    @property
    def _conversations(self) -> ConversationStore:
        return self.options.conversation_store or StorageConversationStore()

    @property
    def _sessions(self) -> SessionStore:
        return SessionStore()

    async def _start(
        self,
        record: SessionRecord,
        toolkit: Toolkit | None,
        session_id: str | None,
        *,
        emit: Emit | None = None,
        answers: dict[str, Answer] | None = None,
        answered: str | None = None,
        subflow: bool = True,
        output_type: object = None,
    ) -> RunResult:
        session_id = check_session_id(session_id) if session_id is not None else new_session_id()
        _toolkit("run", toolkit)
        use_server(say=True)
        if not subflow and FlowRunContext.get() is None:
            raise run_outside_a_flow()
        options = self.options if output_type is None else self.options.model_copy(update={"output_type": output_type})
        OutputSpec.of(options.output_type)  # an unusable type fails here, before anything runs
        with taken_nesting() as given:
            nesting = given or nesting_here(session_id, "sub-agent")
            live = LiveRun(
                options=options,
                transport=self.transport,
                toolkit=toolkit if toolkit is not None else Toolkit(),
                emit=emit,
                answers=answers or {},
                answered=answered,
                fallbacks=tuple((client.name, client.transport) for client in options.fallback),
                record=record,
                nesting=nesting,
                on_held=taken_writes(),
            )
            return await self._attempts(record, session_id, live, subflow)

    async def _attempts(self, record: SessionRecord, session_id: str, live: LiveRun, subflow: bool) -> RunResult:
        """The run, started again when the API failed it before it began (a 503 at its start)."""
        why: str | None = None  # what the API failed the last start with
        try:
            async for attempt in api_retrying(RUN_ATTEMPTS):
                with attempt:
                    if why is not None:
                        logger.info(STARTS_AGAIN, session_id, why, attempt.retry_state.attempt_number, RUN_ATTEMPTS)
                    live.failure = None  # each start tells its own
                    try:
                        result = await self._attempt(record, session_id, live, subflow)
                    except Exception as exc:
                        why = describe(PrefectApiError(unwrap(exc))) if is_transient(exc) else None
                        raise
                    if result.status == "failed" and isinstance(live.failure, PrefectApiError):
                        why = result.error
                        raise FailedOnTheApi(result)
        except FailedOnTheApi as failed:
            return failed.result
        except StorageError as exc:
            return RunResult(status="failed", error=describe(exc), error_type=type(exc).__name__, session_id=session_id)
        except Exception as exc:
            if not is_transient(exc):
                raise
            failure = PrefectApiError(unwrap(exc))
            return RunResult(
                status="failed", error=describe(failure), error_type=type(failure).__name__, session_id=session_id
            )
        return result

    async def _attempt(self, record: SessionRecord, session_id: str, live: LiveRun, subflow: bool) -> RunResult:
        """One start of the session's flow; the transcript travels by reference, stored by
        the flow once it holds the session (a start that is refused writes nothing)."""
        reference = inputs_reference(record)
        async with _committed_as_they_finish():
            if subflow:
                started = agent_run_storing_in(await step_storage())
                outermost = FlowRunContext.get() is None
                async with run_clients():
                    with _its_own_result_setting(), interrupt.armed(outermost):
                        try:
                            outcome = await started(
                                session_id=session_id,
                                prompt=preview(record.prompt),
                                inputs=reference,
                                live=live,
                                return_state=True,
                            )
                        except BaseException as exc:
                            if interrupt.caught() is None:
                                raise
                            raise await interrupt.settle(exc, nested=not outermost) from None
                    await live.finished()
                result = await self._result(outcome, session_id)
            else:
                with interrupt.armed(interrupt.in_deployment()):
                    try:
                        value = await agent_run.fn(
                            session_id=session_id, prompt=preview(record.prompt), inputs=reference, live=live
                        )
                    except BaseException as exc:
                        if interrupt.caught() is None:
                            raise
                        raise await interrupt.settle_in_flow(exc) from None
                await live.finished()
                result = RunResult.model_validate(_unquoted(value.data if isinstance(value, State) else value))
        return result

    @staticmethod
    async def _result(state: Any, session_id: str) -> RunResult:
        try:
            if state.is_paused():  # ended waiting: Prefect gives no result of a paused run
                value = _unquoted(getattr(state.data, "result", state.data))  # a result record, or the data
            else:
                value = _unquoted(await state.aresult(raise_on_failure=False))
        except Exception as exc:
            value = exc
        if isinstance(value, RunResult):
            return value
        return RunResult(
            status="failed",
            error=describe(value) if isinstance(value, BaseException) else (state.message or state.name),
            session_id=session_id,
            flow_run_id=str(state.state_details.flow_run_id) if state.state_details.flow_run_id else None,
        )

    @overload
    def run_sync(
        self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None, output_type: None = None
    ) -> RunResult[OutputT]: ...

    @overload
    def run_sync(
        self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None, output_type: type[RunT]
    ) -> RunResult[RunT]: ...

    @overload
    def run_sync(
        self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None, output_type: object
    ) -> RunResult[Any]: ...

    def run_sync(
        self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None, output_type: object = None
    ) -> RunResult[Any]:
        """``run`` for synchronous code, including inside a synchronous ``@flow``."""
        return _as_sync(self.run(prompt, toolkit, session_id=session_id, output_type=output_type))

    def as_tool(
        self,
        *,
        name: str,
        description: str,
        toolkit: Toolkit | None = None,
        output_type: object = None,
        prompt_description: str = PROMPT_DESCRIPTION,
    ) -> AgentTool:
        """This agent as a tool of another agent's toolkit: the calling model passes a
        ``prompt``, and gets this agent's output (JSON when ``output_type`` is given) or, if
        the run fails, its error. The run is a flow run nested in the calling tool call's task
        run, with a session derived from the call's position, so it resumes with the caller."""
        return AgentTool(
            self,
            name=text("as_tool", "name", name),
            description=text("as_tool", "description", description),
            toolkit=toolkit,
            output_type=output_type,
            prompt_description=prompt_description,
        )

    @overload
    async def map(
        self,
        prompts: Iterable[str],
        toolkit: Toolkit | None = None,
        *,
        max_concurrency: int = 4,
        session_id: str | None = None,
        output_type: None = None,
    ) -> list[RunResult[OutputT]]: ...

    @overload
    async def map(
        self,
        prompts: Iterable[str],
        toolkit: Toolkit | None = None,
        *,
        max_concurrency: int = 4,
        session_id: str | None = None,
        output_type: type[RunT],
    ) -> list[RunResult[RunT]]: ...

    @overload
    async def map(
        self,
        prompts: Iterable[str],
        toolkit: Toolkit | None = None,
        *,
        max_concurrency: int = 4,
        session_id: str | None = None,
        output_type: object,
    ) -> list[RunResult[Any]]: ...

    async def map(
        self,
        prompts: Iterable[str],
        toolkit: Toolkit | None = None,
        *,
        max_concurrency: int = 4,
        session_id: str | None = None,
        output_type: object = None,
    ) -> list[RunResult[Any]]:
        """One run per prompt (subflows inside a flow), at most ``max_concurrency`` at once,
        the results in prompt order. With ``session_id`` (the batch's id) run ``i`` is session
        ``<session_id>.<i>``: run the batch again to resume it. A failure is that run's failed
        result, never a cancelled batch. A budget (``max_cost_usd``, ``max_tokens``) is the
        batch's, shared by its runs, when the batch has a ``session_id``."""
        if session_id is not None:
            check_session_id(session_id, "map")
        _toolkit("map", toolkit)
        if session_id is not None and self.options.budget.bounded:
            use_server()
            await spends_from(session_id, self.options.budget)
        return await map_prompts(
            self,
            texts("map", "prompts", prompts),
            toolkit,
            max_concurrency=max_concurrency,
            session_id=session_id,
            output_type=output_type,
        )

    def ask_sync(
        self, prompt: str, toolkit: Toolkit | None = None, *, conversation_id: str, output_type: object = None
    ) -> RunResult[Any]:
        """``ask`` for synchronous code."""
        return _as_sync(self.ask(prompt, toolkit, conversation_id=conversation_id, output_type=output_type))

    def resume_sync(
        self, session_id: str, answer: Answer, toolkit: Toolkit | None = None, *, output_type: object = None
    ) -> RunResult[Any]:
        """``resume`` for synchronous code."""
        return _as_sync(self.resume(session_id, answer, toolkit, output_type=output_type))

    def map_sync(
        self,
        prompts: Iterable[str],
        toolkit: Toolkit | None = None,
        *,
        max_concurrency: int = 4,
        session_id: str | None = None,
        output_type: object = None,
    ) -> list[RunResult[Any]]:
        """``map`` for synchronous code."""
        batch = self.map(
            prompts, toolkit, max_concurrency=max_concurrency, session_id=session_id, output_type=output_type
        )
        return _as_sync(batch)


class ClientKeywords(TypedDict, total=False):
    """The options the factories take as keywords: ``ClientOptions``' fields but ``model`` and
    ``output_type`` (named parameters) and ``subscription`` (built from ``limit``). Written
    out so that an IDE and ``mypy`` see each one in a ``py.typed`` package; a test keeps the
    keys to ``ClientOptions``' fields, and pydantic still checks the values at run time."""

    system_prompt: str | None
    max_turns: int
    max_cost_usd: float | None
    max_tokens: int | None
    before_llm: BeforeLlm | None
    after_llm: AfterLlm | None
    before_tool: BeforeTool | None
    after_tool: AfterTool | None
    wait_for: WaitFor | None
    policies: Mapping[str, ToolPolicy]
    conversation_store: ConversationStore | None
    task_config: TaskConfig
    model_retries: int
    model_retry_wait: float
    output_retries: int
    on_quota: OnQuota
    fallback: Client[Any] | Sequence[Client[Any]]
    quota_wait: float
    max_quota_wait: float
    max_tool_calls: int
    max_parallel_tool_calls: int
    max_tool_result: int
    max_argument_depth: int


class OptionsUpdate(ClientKeywords, total=False):
    """What ``Client.with_options`` may change: every one of ``ClientOptions``' fields."""

    model: str | None
    subscription: SubscriptionLimit | None
    output_type: Any


def create_in_process_client(
    generate: Generate,
    *,
    output_type: type[OutputT] | None = None,
    model: str | None = None,
    limit: str | None = None,
    max_concurrent: int | None = None,
    per_minute: float | None = None,
    **options: Unpack[ClientKeywords],
) -> Client[OutputT]:
    """A client whose model is a Python callable: ``generate(request) -> reply``, sync or
    async, where a reply is a ``ModelReply``, ``{"content": ...}`` or
    ``{"tool_calls": [{"id"?, "name", "arguments"}]}``.

    ``limit`` names the subscription the model's turns count against, on every worker of
    the Prefect server: at most ``max_concurrent`` turns in flight, ``per_minute`` started
    per minute (Prefect global concurrency limits ``nexusflow-subscription-<limit>``)."""
    where = "create_in_process_client"
    function(where, "generate", generate)
    subscription = SubscriptionLimit.of(limit, max_concurrent, per_minute)
    checked = client_options(where, model, subscription, output_type, options)
    use_server()  # checked first; before a flow of the program's own starts the embedded server
    return Client(in_process_transport(generate), checked)


def client_options(
    where: str,
    model: str | None,
    subscription: SubscriptionLimit | None,
    output_type: object,
    options: Mapping[str, Any],
) -> ClientOptions:
    """The options every client takes, checked, with the answer policy of the settings."""
    fallback = options.get("fallback", ())
    if isinstance(fallback, Client):
        fallback = (fallback,)
    if not isinstance(fallback, list | tuple) or not all(isinstance(one, Client) for one in fallback):
        raise option_refused(where, "fallback", "expected clients made by create_cli_client and the like", fallback)
    return build(
        where,
        ClientOptions,
        model=model,
        subscription=subscription,
        output_type=output_type,
        **with_answer_policy({**options, "fallback": tuple(fallback)}),
    )


def with_answer_policy(options: dict[str, Any]) -> dict[str, Any]:
    """A ``wait_for`` from ``NEXUSFLOW_WAIT`` where the caller gave none (``wait_for=None``
    given is kept: that caller wants the run to end pending)."""
    if "wait_for" in options:
        return options
    policy = settings()
    if policy.wait is None:
        return options
    from .config.waits import policy_wait  # its Prefect imports only where a policy is set

    return {**options, "wait_for": policy_wait(policy.wait, policy.wait_timeout)}
