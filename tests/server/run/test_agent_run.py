"""The run as an object (``nexusflow/flows/run.py``), driven method by method with no flow
around it: a turn asks the model and records it, a call runs a tool, settling passes a
finished call and suspends the run at a pending one, and the run's end gives its result and
its state. The turn, the call and settling hold the session on the test's server (slow); how
a failure is announced, decided by class, is pinned with no server in
tests/offline/test_announced.py."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
import pytest
from prefect.settings import PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW, temporary_settings
from prefect.states import StateType

from nexusflow import Client, Toolkit, create_in_process_client, suspend, tool
from nexusflow._prefect.session_lock import session_lease
from nexusflow._prefect.storage import step_storage
from nexusflow.errors import PrefectApiError
from nexusflow.flows.run import AWAITING, AgentRun, HeldRun, tool_runtime
from nexusflow.flows.steps import Steps
from nexusflow.messages import ModelRequest, RunResult, ToolCall, UserMessage
from nexusflow.state.suspension import Suspended
from nexusflow.tasks import ToolRecord
from nexusflow.tasks.live_run import LiveRun
from nexusflow.testing import ScriptedModel

pytestmark = pytest.mark.anyio

LOGGER = logging.getLogger("nexusflow.tests.agent_run")


@pytest.fixture
def no_flow_run() -> Iterator[None]:
    """The steps' task runs start with no flow run around them: their logs stay local (Prefect
    warns, and the suite makes warnings errors, when a log has no flow run to go to)."""
    with temporary_settings({PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW: "ignore"}):
        yield


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def launch(rocket: str) -> str:
    """Launches, after approval."""
    return suspend(f"May I launch {rocket}?")


async def started(session_id: str, client: Client, toolkit: Toolkit) -> AgentRun:
    """The run as its flow makes it, with the flow run's id made up. It never writes its
    progress artifact: with no flow run around it, Prefect warns (an error here) when a turn
    ends a second or more after the run began, as on a loaded machine."""
    live = LiveRun(options=client.options, transport=client.transport, toolkit=toolkit)
    steps = Steps(session_id, await step_storage(), tool_runtime(live), client.options.task_config)
    run = AgentRun(session_id, f"run-of-{session_id}", live, steps, LOGGER)
    run.progress.interval = math.inf
    return run


@asynccontextmanager
async def held(run: AgentRun) -> AsyncIterator[HeldRun]:
    """The run holding its session, its transport open, as ``AgentRun.held`` makes it."""
    async with (
        session_lease(run.session_id, run.run_id) as lease,
        run.live.transport(LOGGER.info) as transport,
        AsyncExitStack() as opened,
    ):
        yield HeldRun(run, lease, transport, opened, None)


def asking(text: str) -> ModelRequest:
    return ModelRequest(messages=[UserMessage(content=text)])


@pytest.mark.slow
@pytest.mark.usefixtures("no_flow_run")
async def test_a_turn_asks_the_model_and_records_it_and_a_second_run_replays_it(session_id):
    model = ScriptedModel(["four"])
    client = create_in_process_client(model)
    async with Toolkit() as toolkit:
        first = await started(session_id, client, toolkit)
        async with held(first) as turns:
            record, replayed = await turns.turn(0, asking("2+2?"))
        again = await started(session_id, client, toolkit)
        async with held(again) as turns:
            replay, replayed_again = await turns.turn(0, asking("2+2?"))
    assert (record.reply.content, replayed) == ("four", False)
    assert [(e.name, e.status, e.replayed) for e in first.steps.entries] == [("turn-0", "Completed", False)]
    assert (replay.reply.content, replayed_again, model.calls) == ("four", True, 1), "replayed, not asked again"
    assert [(e.name, e.status) for e in again.steps.entries] == [("turn-0", "Cached")]


@pytest.mark.slow
@pytest.mark.usefixtures("no_flow_run")
async def test_a_call_runs_its_tool_and_settling_passes_a_finished_call(session_id):
    async with Toolkit(tools=[add]) as toolkit:
        run = await started(session_id, create_in_process_client(ScriptedModel([])), toolkit)
        async with held(run) as turns:
            call = ToolCall(name="add", arguments={"a": 2, "b": 3})
            record, replayed = await turns.call(0, 0, call)
            settled = await turns.settle(0, 0, call, record, replayed)
    assert (record.result.content, replayed) == ("5", False)
    assert settled == (record, False), "a call that asks nothing is the model's to read as it is"
    assert [(e.name, e.kind) for e in run.steps.entries] == [("tool-0-add", "tool")]


async def launch_suspended(run: AgentRun) -> tuple[ToolRecord, Suspended]:
    """``launch`` called and settled without ``wait_for``: its pending record, and the
    suspension settling raised."""
    async with held(run) as turns:
        call = ToolCall(name="launch", arguments={"rocket": "R1"})
        record, replayed = await turns.call(0, 0, call)
        with pytest.raises(Suspended) as suspended:
            await turns.settle(0, 0, call, record, replayed)
    return record, suspended.value


@pytest.mark.slow
@pytest.mark.usefixtures("no_flow_run")
async def test_settling_a_pending_call_without_wait_for_suspends_the_run(session_id):
    async with Toolkit(tools=[launch]) as toolkit:
        run = await started(session_id, create_in_process_client(ScriptedModel([])), toolkit)
        record, suspended = await launch_suspended(run)
    assert record.result.pending is not None
    assert suspended.request.id == f"{session_id}.0.0"
    assert suspended.request.prompt == "May I launch R1?"
    assert [e.name for e in run.steps.entries] == ["tool-0-launch", "suspend-0-launch"]


@pytest.mark.slow
@pytest.mark.usefixtures("no_flow_run")
async def test_the_end_gives_the_result_and_the_state_the_flow_returns(session_id):
    async with Toolkit(tools=[launch]) as toolkit:
        run = await started(session_id, create_in_process_client(ScriptedModel([])), toolkit)
        _, suspended = await launch_suspended(run)

        waiting = await run.ended_by(suspended)
        failed = await run.ended_by(ValueError("no rocket"))
        completed = run.finish(run.result("completed", text="done"))
        await run.live.finished()

    assert (waiting.type, waiting.name) == (StateType.PAUSED, AWAITING)
    pending = waiting.data.unquote()
    assert (pending.status, pending.request) == ("pending", suspended.request)
    assert failed.type == StateType.FAILED
    outcome = failed.data.unquote()
    assert (outcome.status, outcome.error, outcome.error_type) == ("failed", "ValueError: no rocket", "ValueError")
    assert failed.message == outcome.error
    assert isinstance(run.live.failure, ValueError), "what the client decides a restart by"
    result = completed.unquote()
    assert isinstance(result, RunResult)
    assert (result.status, result.text, result.session_id) == ("completed", "done", session_id)


@pytest.mark.slow
@pytest.mark.usefixtures("no_flow_run")
async def test_a_failure_of_the_api_is_left_for_the_client_as_its_class(session_id):
    """``Client.run`` starts a run again when it failed on the API: known by its class, so a
    transient error the run met is left as a ``PrefectApiError``."""
    async with Toolkit() as toolkit:
        run = await started(session_id, create_in_process_client(ScriptedModel([])), toolkit)
        failed = await run.ended_by(httpx.ConnectError("the API went away"))
        await run.live.finished()
    assert isinstance(run.live.failure, PrefectApiError)
    assert failed.data.unquote().error_type == "PrefectApiError"
