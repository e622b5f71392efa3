"""Agents composed: another agent as a tool (``Client.as_tool``), and many runs at once
(``Client.map``).

Both start ordinary ``Client.run`` runs whose session ids derive from where they start: the
calling tool call's position, or the batch id and the prompt's index. Resuming the caller
(or rerunning the batch) therefore resumes them too, and their finished steps replay."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import anyio
import cloudpickle  # type: ignore[import-untyped]
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext, TaskRunContext
from prefect.futures import PrefectFuture
from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from pydantic_core import to_json

from ._prefect.fanout import SUBMITTING, Moved, Pulse, outcome_within
from ._prefect.let_go import DRAIN_WITHIN, let_go_of
from ._prefect.session_lock import being_deleted, last_beat
from .errors import describe, map_concurrency_too_low, map_member_stays_here
from .messages import FunctionSpec, RunResult, ToolResult, ToolSpec
from .state._position import CallPosition, child_session_id
from .state.store import Nesting, nested_in, nesting_here
from .toolkit import Toolkit
from .toolkit.errors import tool_error_arguments

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
        with nested_in(Nesting(parent=position.session_id, kind="sub-agent")):
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
    its own failed result; its siblings go on.

    Called in a flow (not in one of its tasks), each run is a ``map-member`` task run on the
    flow's task runner: threads by default, a Dask cluster's worker processes with
    prefect-dask's ``DaskTaskRunner``. Elsewhere the runs share this event loop."""
    if max_concurrency < 1:
        raise map_concurrency_too_low(max_concurrency)
    prompts = list(prompts)
    runner = _task_runner()
    if runner is not None and not isinstance(runner, ThreadPoolTaskRunner):
        _crosses(runner, client=client, toolkit=toolkit, output_type=output_type)
    results: list[RunResult[Any] | None] = [None] * len(prompts)
    limiter = anyio.CapacityLimiter(max_concurrency)
    waiters = anyio.CapacityLimiter(max_concurrency)  # a thread each: anyio's default pool has 40
    moved = Moved()

    async def member(index: int, prompt: str) -> None:
        member_id = child_session_id(session_id, index) if session_id is not None else uuid.uuid4().hex
        nesting = nesting_here(member_id, "member", session_id)
        async with limiter:
            try:
                if runner is None:
                    with nested_in(nesting):
                        run = await client.run(prompt, toolkit, session_id=member_id, output_type=output_type)
                    results[index] = run
                else:
                    run = await _awaited(waiters, moved, client, prompt, toolkit, member_id, nesting, output_type)
                    results[index] = run
            except Exception as exc:
                results[index] = RunResult(status="failed", error=describe(exc), session_id=member_id)

    with _server_for_other_processes(runner):
        async with anyio.create_task_group() as group:
            for index, prompt in enumerate(prompts):
                group.start_soon(member, index, prompt)
    return [result for result in results if result is not None]


def _server_for_other_processes(runner: TaskRunner[Any] | None) -> AbstractContextManager[object]:
    """Members sent to other processes talk to this flow's server: the task runner sends
    them the settings of the moment, which name no API when the server is this process's
    embedded one; each worker would then start an embedded server of its own, on the same
    SQLite file (4 members on 2 workers took 48 s instead of 25). They are given its address."""
    if runner is None or isinstance(runner, ThreadPoolTaskRunner) or get_current_settings().api.url:
        return nullcontext()
    from prefect.server.api.server import SubprocessASGIServer

    embedded = SubprocessASGIServer()
    if not embedded.running:
        return nullcontext()
    return temporary_settings({PREFECT_API_URL: embedded.api_url})


def _task_runner() -> TaskRunner[Any] | None:
    """The task runner of the flow ``map`` is called in; None outside a flow, and inside a
    task run, whose own thread or process the runs then share (a task that submitted to its
    flow's cluster and waited could hold every worker of it)."""
    context = FlowRunContext.get()
    if context is None or TaskRunContext.get() is not None:
        return None
    return context.task_runner


def _crosses(runner: TaskRunner[Any], **sent: object) -> None:
    """What a member task takes to another process is pickled there by the task runner: a
    client, toolkit or output type that cannot be is refused before any run starts, by name,
    instead of failing each member with a serializer's traceback."""
    for what, value in sent.items():
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            raise map_member_stays_here(what.replace("_", " "), type(runner).__name__, exc) from exc


@task(name="map-member", task_run_name="member-{session_id}", cache_policy=NO_CACHE, persist_result=False)
async def _member(
    client: Runner, prompt: str, toolkit: Toolkit | None, session_id: str, nesting: Nesting | None, output_type: object
) -> RunResult[Any]:
    """One member of a fan-out, in whichever thread or process the flow's task runner gives
    it: an ordinary run (a flow run nested in this task run), with its own session, linked to
    its batch and to the run that started it (told here: another process sees no context).
    It ends once its session's lock is deleted: a Dask worker's process ends without running
    the exit hooks that would wait for that delete (``_prefect.let_go``)."""
    with nested_in(nesting):
        result = await client.run(prompt, toolkit, session_id=session_id, output_type=output_type)
    lock = being_deleted(await last_beat(session_id))
    if lock is not None:
        await let_go_of(lock, within=DRAIN_WITHIN)  # its own, never another member's
    return result


def _submitted(
    client: Runner, prompt: str, toolkit: Toolkit | None, session_id: str, nesting: Nesting | None, output_type: object
) -> PrefectFuture[Any]:
    with SUBMITTING:
        return _member.submit(client, prompt, toolkit, session_id, nesting, output_type)


async def _awaited(
    waiters: anyio.CapacityLimiter,
    moved: Moved,
    client: Runner,
    prompt: str,
    toolkit: Toolkit | None,
    session_id: str,
    nesting: Nesting | None,
    output_type: object,
) -> RunResult[Any]:
    """Submitted, then waited for a slice at a time in a worker thread: a Dask cluster starts,
    and a future blocks, without holding up the flow's event loop. Between slices the batch
    watches the member's session as a contender would: a member whose process stopped while
    it held it, and that no retry took over, is that member's ``MapMemberLost`` within
    ``GIVE_UP_AFTER`` seconds, whether or not its task runner ever says so (a SIGSTOPped Dask
    worker is never reported; a killed one is ``KilledWorker``, raised from the future); one
    that never starts is, ``START_WITHIN`` seconds after the batch last moved."""
    pulse = Pulse(session_id, await last_beat(session_id), moved)
    future = await anyio.to_thread.run_sync(
        _submitted, client, prompt, toolkit, session_id, nesting, output_type, limiter=waiters
    )
    pulse.submitted = time.monotonic()
    while True:
        try:
            outcome = await anyio.to_thread.run_sync(outcome_within, future, abandon_on_cancel=True, limiter=waiters)
        except Exception:
            moved.now()  # its runner reported it failed or dead: its place there is free
            raise
        if outcome is not None:
            moved.now()
            return outcome
        lost = await pulse.lost()
        if lost is not None:
            raise lost  # not a move: a member given up on may still hold its place on the runner
