"""What each task run of an agent run shows in the Prefect UI: its name, its state and its
own log lines, read back from the real server; and the run's step table (``Steps.entries``)."""

import re
import time

import anyio
import pytest
from prefect import get_client
from prefect.client.schemas.filters import (
    TaskRunFilter,
    TaskRunFilterFlowRunId,
    TaskRunFilterName,
)
from prefect.client.schemas.objects import TaskRun
from prefect.context import FlowRunContext

import nexusflow.flows.agent as agent_flow
from nexusflow import Answer, Request, Toolkit, create_in_process_client, tool
from nexusflow._support.secrets import register
from nexusflow.flows.steps import Steps
from nexusflow.tasks.tool_call import ANNOUNCED_AFTER
from nexusflow.testing import ScriptedModel

from approvals import gated_deploy
from helpers.prefect_api import by_name, task_run_log_lines, task_run_logs, task_runs

pytestmark = [pytest.mark.anyio]

fragile_runs: list[int] = []


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key}"


@tool
def fragile(n: int) -> int:
    """Raises on purpose."""
    fragile_runs.append(n)
    raise RuntimeError(f"fragile failed on {n}")


deploy = gated_deploy()


def calls(*pairs: tuple[str, dict]) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments} for name, arguments in pairs]}


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Steps]:
    """The ``Steps`` of every run the test starts, to read their entries afterwards."""
    made: list[Steps] = []

    class Recorded(Steps):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(agent_flow, "Steps", Recorded)
    return made


def assert_entries_match(steps: Steps, runs: list[TaskRun]) -> None:
    """Every task run of the run has its row, with the name and state the UI shows."""
    steps_runs = [run for run in runs if run.name != "acp-session"]
    assert sorted((e.name, e.status) for e in steps.entries) == sorted((r.name, r.state.name) for r in steps_runs)
    for entry in steps.entries:
        assert entry.kind == entry.name.split("-")[0]
        assert entry.replayed == (entry.status == "Cached")
        assert entry.seconds >= 0 and (entry.seconds == 0 or not entry.replayed)


@pytest.mark.slow
async def test_names_states_and_logs_of_a_turn_and_its_calls_and_the_replay(session_id, recorded):
    fragile_runs.clear()
    model = ScriptedModel(
        [
            calls(("lookup", {"key": "k1"}), ("lookup", {"key": "k2"}), ("fragile", {"n": 3}))
            | {"usage": {"input_tokens": 10, "output_tokens": 5}, "stats": {"launches": 1}},
            lambda request: "answer: " + " | ".join(m.content for m in request.messages if m.role == "tool"),
        ]
    )
    client = create_in_process_client(model)
    async with await Toolkit.load(tools=[lookup, fragile]) as toolkit:
        result = await client.run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    error = 'error: tool "fragile" raised RuntimeError: fragile failed on 3'
    assert result.text == f"answer: value-of-k1 | value-of-k2 | {error}"

    runs = await task_runs(result.flow_run_id, expected=5)
    named = by_name(runs)
    assert set(named) == {"turn-0", "tool-0-lookup", "tool-0-lookup-2", "tool-0-fragile", "turn-1"}
    assert {name: run.state.name for name, run in named.items()} == {
        "turn-0": "Completed",
        "tool-0-lookup": "Completed",
        "tool-0-lookup-2": "Completed",
        "tool-0-fragile": "ToolError",
        "turn-1": "Completed",
    }
    failed = named["tool-0-fragile"].state
    assert failed.is_completed() and failed.message == error, "an error is visible without failing the run"

    assert await task_run_logs(named["tool-0-lookup-2"]) == ['arguments: {"key": "k2"} · result: value-of-k2']
    assert await task_run_logs(named["tool-0-fragile"]) == [f'arguments: {{"n": 3}} · {error}']
    (decided,) = await task_run_logs(named["turn-0"])
    made = re.escape('calls: lookup({"key": "k1"}), lookup({"key": "k2"}), fragile({"n": 3})')
    assert re.fullmatch(made + r" · seconds \d+\.\d\d · tokens 10 in / 5 out · cost \$\? · launches 1", decided), (
        decided
    )
    (answered,) = await task_run_logs(named["turn-1"])
    assert answered.startswith(f"answer: {result.text} · seconds "), answered
    assert_entries_match(recorded[0], runs)
    names = [entry.name for entry in recorded[0].entries]
    assert names[0] == "turn-0" and names[-1] == "turn-1", "rows come in the order steps finish"

    # The same session again: every step replays, the failed call included, and runs no more.
    async with await Toolkit.load(tools=[lookup, fragile]) as toolkit:
        again = await client.run("go", toolkit, session_id=session_id)
    assert again.status == "completed" and again.text == result.text, "the replayed ToolError record is read"
    assert fragile_runs == [3]
    assert model.calls == 2
    replayed = by_name(await task_runs(again.flow_run_id, expected=5))
    assert {name: run.state.name for name, run in replayed.items()} == dict.fromkeys(named, "Cached")
    assert_entries_match(recorded[1], list(replayed.values()))
    assert all(e.replayed and e.seconds == 0 for e in recorded[1].entries)


@pytest.mark.slow  # several runs through the server: the fast tier stays under 90 s
async def test_secrets_are_redacted_and_long_results_cut_in_a_tool_runs_logs(session_id):
    secret = "sk-nexusflow-test-" + session_id[-8:]
    register(secret)

    @tool
    def echo(text: str) -> str:
        """Echoes its text at length."""
        return text + "x" * 5000

    model = ScriptedModel([calls(("echo", {"text": f"token={secret}"})), "done"])
    async with await Toolkit.load(tools=[echo]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error

    named = by_name(await task_runs(result.flow_run_id, expected=3))
    (shown,) = await task_run_logs(named["tool-0-echo"])
    full = len("token=***") + 5000
    cut = "token=***" + "x" * (2000 - len("token=***")) + f"… ({full} characters)"
    assert shown == f'arguments: {{"text": "token=***"}} · result: {cut}'
    turn = await task_run_logs(named["turn-0"])
    assert turn[0].startswith('calls: echo({"text": "token=***"}) · seconds ')
    everything = [line for run in named.values() for line in await task_run_logs(run)]
    assert everything and not any(secret in line for line in everything)


@pytest.mark.slow
async def test_a_suspended_call_awaits_and_the_approved_call_runs_again_by_name(session_id, recorded):
    model = ScriptedModel([calls(("deploy", {"service": "api"})), "done"])
    client = create_in_process_client(model)
    async with await Toolkit.load(tools=[deploy]) as toolkit:
        first = await client.run("go", toolkit, session_id=session_id)
        assert first.status == "pending"
        runs = await task_runs(first.flow_run_id, expected=3)
        named = by_name(runs)
        assert {name: run.state.name for name, run in named.items()} == {
            "turn-0": "Completed",
            "tool-0-deploy": "AwaitingAnswer",
            "suspend-0-deploy": "Completed",
        }
        assert named["tool-0-deploy"].state.message == "May I deploy api?"
        assert await task_run_logs(named["tool-0-deploy"]) == [
            'arguments: {"service": "api"} · pending: May I deploy api?'
        ]
        asked = await task_run_logs(named["suspend-0-deploy"])
        assert asked[0] == f"request {first.request.id} (approval): May I deploy api?"
        assert_entries_match(recorded[0], runs)

        resumed = await client.resume(session_id, Answer(id=first.request.id, ok=True), toolkit)
    assert resumed.status == "completed" and resumed.text == "done", resumed.error
    runs = await task_runs(resumed.flow_run_id, expected=6)
    named = by_name(runs)
    assert {name: run.state.name for name, run in named.items()} == {
        "turn-0": "Cached",
        "tool-0-deploy": "Cached",
        "suspend-0-deploy": "Cached",
        "wait-0-deploy": "Approved",
        "tool-0-deploy-approved": "Completed",
        "turn-1": "Completed",
    }
    approved = await task_run_logs(named["tool-0-deploy-approved"])
    assert approved == ['arguments: {"service": "api"} · result: deployed api']
    assert_entries_match(recorded[1], runs)
    assert [e.name for e in recorded[1].entries] == [
        "turn-0",
        "tool-0-deploy",
        "suspend-0-deploy",
        "wait-0-deploy",
        "tool-0-deploy-approved",
        "turn-1",
    ]


@pytest.mark.slow
async def test_waits_are_named_by_their_decision_and_repeats_keep_their_suffix(session_id, recorded):
    decisions = {
        "api": Answer(id="", ok=True),
        "db": Answer(id="", ok=False),
        "cache": Answer(id="", ok=False, reason="expired"),
    }

    async def wait_for(request: Request) -> Answer:
        service = request.prompt.removeprefix("May I deploy ").removesuffix("?")
        return decisions[service].model_copy(update={"id": request.id})

    model = ScriptedModel(
        [calls(("deploy", {"service": "api"}), ("deploy", {"service": "db"}), ("deploy", {"service": "cache"})), "done"]
    )
    async with await Toolkit.load(tools=[deploy]) as toolkit:
        result = await create_in_process_client(model, wait_for=wait_for).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error

    runs = await task_runs(result.flow_run_id, expected=12)
    named = by_name(runs)
    assert {name: run.state.name for name, run in named.items()} == {
        "turn-0": "Completed",
        "tool-0-deploy": "AwaitingAnswer",
        "tool-0-deploy-2": "AwaitingAnswer",
        "tool-0-deploy-3": "AwaitingAnswer",
        "suspend-0-deploy": "Completed",
        "wait-0-deploy": "Approved",
        "tool-0-deploy-approved": "Completed",
        "suspend-0-deploy-2": "Completed",
        "wait-0-deploy-2": "Declined",
        "suspend-0-deploy-3": "Completed",
        "wait-0-deploy-3": "Expired",
        "turn-1": "Completed",
    }
    assert named["wait-0-deploy-3"].state.message == "expired"
    assert named["tool-0-deploy-2"].state.message == "May I deploy db?"
    assert_entries_match(recorded[0], runs)


@pytest.mark.slow
async def test_a_slow_call_shows_its_arguments_while_it_runs_and_its_result_after(session_id):
    """A quick call logs one line; one still running after ``ANNOUNCED_AFTER`` seconds shows
    its arguments then, read from the server while the tool still runs."""
    seen: list[list[str]] = []

    @tool
    async def slow(city: str) -> str:
        """Takes its time."""
        deadline = anyio.current_time() + 20
        while not seen and anyio.current_time() < deadline:
            await anyio.sleep(ANNOUNCED_AFTER)
            this_run = TaskRunFilter(
                flow_run_id=TaskRunFilterFlowRunId(any_=[FlowRunContext.get().flow_run.id]),
                name=TaskRunFilterName(any_=["tool-0-slow"]),
            )
            async with get_client() as client:
                (running,) = await client.read_task_runs(task_run_filter=this_run)
            if lines := await task_run_log_lines(running):
                seen.append(lines)
        return f"sunny in {city}"

    model = ScriptedModel([calls(("slow", {"city": "Oslo"}), ("lookup", {"key": "k1"})), "done"])
    async with await Toolkit.load(tools=[slow, lookup]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error

    assert seen == [['arguments: {"city": "Oslo"}']], "the arguments are on the page while the call runs"
    named = by_name(await task_runs(result.flow_run_id, expected=4))
    assert await task_run_logs(named["tool-0-slow"]) == ['arguments: {"city": "Oslo"}', "result: sunny in Oslo"]
    assert await task_run_logs(named["tool-0-lookup"]) == ['arguments: {"key": "k1"} · result: value-of-k1']


@pytest.mark.slow
async def test_a_call_that_blocks_the_event_loop_past_the_announcement_still_shows_its_arguments(session_id):
    """The announcement's timer is due when the call returns, but the loop never got to run
    it: the one line must still carry the arguments."""

    @tool
    async def blocking(city: str) -> str:
        """Blocks the event loop (a common mistake in an async tool)."""
        time.sleep(ANNOUNCED_AFTER + 0.2)
        return f"rain in {city}"

    model = ScriptedModel([calls(("blocking", {"city": "Oslo"})), "done"])
    async with await Toolkit.load(tools=[blocking]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    named = by_name(await task_runs(result.flow_run_id, expected=3))
    assert await task_run_logs(named["tool-0-blocking"]) == ['arguments: {"city": "Oslo"} · result: rain in Oslo']
