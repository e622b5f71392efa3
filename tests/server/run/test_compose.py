"""Agents composed: an agent as another agent's tool (a flow run nested in the calling tool
call's task run, resumed with its caller) and fan-out with ``Client.map``."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
from pydantic import BaseModel

from nexusflow import (
    Client,
    CliStyles,
    ModelRequest,
    RunResult,
    Toolkit,
    ToolMessage,
    Transport,
    create_cli_client,
    create_in_process_client,
    suspend,
    tool,
)
from nexusflow.testing import ScriptedModel

from cli_fixtures import envelope_answer, styled
from helpers.prefect_api import task_run
from paths import HELPERS

pytestmark = [pytest.mark.anyio]


class Review(BaseModel):
    verdict: str
    score: int


def review_call(prompt: str = "Review: Agents compose.") -> dict[str, object]:
    return {"tool_calls": [{"name": "reviewer", "arguments": {"prompt": prompt}}]}


def tool_message(result: RunResult) -> str:
    return next(m.content or "" for m in result.messages if isinstance(m, ToolMessage))


async def flow_run_named(name: str):
    async with get_client() as client:
        runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
    assert len(runs) == 1, f"{len(runs)} flow runs are named {name}"
    return runs[0]


# An agent as a tool.


@pytest.mark.slow
async def test_the_sub_agent_runs_nested_in_the_tool_calls_task_run(session_id):
    sub_model = ScriptedModel(["Approved: short and clear."])
    reviewer = create_in_process_client(sub_model).as_tool(name="reviewer", description="Review a draft.")
    writer = create_in_process_client(
        ScriptedModel([review_call(), lambda request: f"published ({request.messages[-1].content})"])
    )
    result = await writer.run("Write a line and have it reviewed.", Toolkit([reviewer]), session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "published (Approved: short and clear.)"
    assert sub_model.requests[0].messages[-1].content == "Review: Agents compose."

    nested = await flow_run_named(f"agent-{session_id}.0.0")
    assert nested.parameters["session_id"] == f"{session_id}.0.0", "the session derives from the call's position"
    assert nested.state is not None and nested.state.is_completed()
    assert nested.parent_task_run_id is not None
    tracking = await task_run(nested.parent_task_run_id)
    # Prefect nests a flow run called inside a task run under a task run of the calling flow
    # run that stands for it; that one's parent is the tool call's task run. Both are read by
    # id (task_run waits until the server has recorded them).
    assert str(tracking.flow_run_id) == result.flow_run_id
    (parent,) = tracking.task_inputs["__parents__"]
    tool_run = await task_run(parent.id)
    assert tool_run.name == "tool-0-reviewer"
    assert str(tool_run.flow_run_id) == result.flow_run_id


async def test_a_sub_agent_leaves_no_result_record_outside_nexusflows_own(session_id, storage):
    """Prefect persists a subflow's return value when the task run it is called in persists
    its results (the task's setting is read before the flow's ``persist_result=False``): a
    record under a random key at the storage's root, that nothing names and ``prune`` cannot
    find (the soak found one per sub-agent run)."""
    before = set(storage.iterdir()) if storage.exists() else set()
    reviewer = create_in_process_client(ScriptedModel(["Approved."])).as_tool(name="reviewer", description="Review.")
    writer = create_in_process_client(ScriptedModel([review_call(), "published"]))
    result = await writer.run("Write a line and have it reviewed.", Toolkit([reviewer]), session_id=session_id)
    assert result.status == "completed", result.error
    assert sorted(path.name for path in set(storage.iterdir()) - before if path.name != "nexusflow") == []


@pytest.mark.slow
async def test_a_typed_sub_agent_gives_json_a_failed_one_its_error_a_pending_one_its_question(session_id):
    @tool
    def publish() -> str:
        """Publish the post."""
        return suspend("May I publish?")

    typed = create_in_process_client(ScriptedModel(['```json\n{"verdict": "ok", "score": 9}\n```']))
    broken = create_in_process_client(ScriptedModel([]))
    asking = create_in_process_client(ScriptedModel([{"tool_calls": [{"name": "publish", "arguments": {}}]}]))
    tools = Toolkit(
        [
            typed.as_tool(name="reviewer", description="Review a draft.", output_type=Review),
            broken.as_tool(name="checker", description="Check the facts."),
            asking.as_tool(name="publisher", description="Publish.", toolkit=Toolkit([publish])),
        ]
    )
    calls = {
        "tool_calls": [
            {"name": "reviewer", "arguments": {"prompt": "Review it."}},
            {"name": "checker", "arguments": {"prompt": "Check it."}},
            {"name": "publisher", "arguments": {"prompt": "Publish it."}},
        ]
    }
    writer = create_in_process_client(ScriptedModel([calls, "done"]))
    result = await writer.run("Write.", tools, session_id=session_id)
    assert result.status == "completed", result.error
    results = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert results[0] == '{"verdict":"ok","score":9}'
    assert results[1] == (
        'error: agent "checker" failed: model: the scripted model has no reply for turn 0 (0 scripted)'
    )
    assert results[2] == f'error: agent "publisher" waits for an answer (session "{session_id}.0.2"): May I publish?'
    assert result.metrics.tool_errors == 2


@pytest.mark.slow
async def test_a_cli_sub_agent_reviews_for_an_in_process_writer(session_id, fake):
    fake.script(styled("claude", envelope_answer("Approved by the CLI reviewer.")))
    reviewer = create_cli_client(style=CliStyles.CLAUDE, command=fake.command, transport=Transport.CLI).as_tool(
        name="reviewer", description="Review a draft."
    )
    writer = create_in_process_client(
        ScriptedModel([review_call(), lambda request: f"published ({request.messages[-1].content})"])
    )
    result = await writer.run("Write a line and have it reviewed.", Toolkit([reviewer]), session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "published (Approved by the CLI reviewer.)"
    (launch,) = fake.calls()
    assert "Review: Agents compose." in launch["stdin"] + "".join(launch["files"].values()) + " ".join(launch["argv"])


@pytest.mark.slow
async def test_an_acp_sub_agent_reviews_for_an_in_process_writer(session_id, agent):
    agent.script([[{"say": "Approved over ACP."}]])
    acp = create_cli_client(style=agent.style, command=agent.command, transport=Transport.ACP, env=agent.env)
    writer = create_in_process_client(
        ScriptedModel([review_call(), lambda request: f"published ({request.messages[-1].content})"])
    )
    tools = Toolkit([acp.as_tool(name="reviewer", description="Review a draft.")])
    result = await writer.run("Write a line and have it reviewed.", tools, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "published (Approved over ACP.)"
    (prompted,) = agent.received("session/prompt")
    assert "Review: Agents compose." in str(prompted)


async def test_the_tool_asks_for_a_prompt_string(session_id):
    reviewer = create_in_process_client(ScriptedModel([])).as_tool(name="reviewer", description="Review a draft.")
    result = await Toolkit([reviewer]).call("reviewer", {"text": "no prompt"})
    assert result.is_error
    assert result.content == 'error: invalid arguments for tool "reviewer": expected {"prompt": "<the task>"}'


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def crash_and_resume(tmp_path: Path, session_id: str, *flags: str) -> RunResult:
    """Run ``compose_crash.py``, SIGKILL it in the reviewer's second turn, check what had been
    asked by then, resume it in a new process and return the resumed run's result."""
    command = [sys.executable, str(HELPERS / "compose_crash.py"), session_id, str(tmp_path), *flags]
    crash = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (tmp_path / "in_second_turn").exists():
            assert crash.poll() is None, crash.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the reviewer never reached its second turn"
            time.sleep(0.1)
        crash.send_signal(signal.SIGKILL)
    finally:
        crash.communicate(timeout=60)
    assert crash.returncode == -signal.SIGKILL
    assert lines(tmp_path / "reviewer_turns") == ["0", "1"]
    assert lines(tmp_path / "writer_turns") == ([] if "--native" in flags else ["0"])

    done = subprocess.run([*command, "--no-crash"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return RunResult.model_validate_json(done.stdout.strip().splitlines()[-1])


# The writer and its reviewer killed in the reviewer's second turn: test_server_places.py.


@pytest.mark.slow
def test_a_kill_inside_a_users_own_task_resumes_without_asking_again(tmp_path, session_id):
    """The Prefect-native way: the agent runs inside a user's ``@task``. Its finished steps
    are stored as they finish, not when the task ends, so a SIGKILL loses none of them."""
    result = crash_and_resume(tmp_path, session_id, "--native")
    assert result.status == "completed", result.error
    assert result.text == "approved (the rule on style: short sentences)"
    assert lines(tmp_path / "reviewer_turns") == ["0", "1", "1"], "only the turn in flight was asked again"
    assert lines(tmp_path / "lookups") == ["style"], "the finished tool call replayed"


# Fan-out.


class Fact(BaseModel):
    topic: str
    number: int


def fact_model(asked: list[str]):
    def model(request: ModelRequest) -> str:
        prompt = request.messages[-1].content or ""
        asked.append(prompt)
        number = int(prompt.split()[-1])
        if number == 13:
            raise RuntimeError("the model is down for topic 13")
        return f'{{"topic": "{prompt}", "number": {number}}}'

    return model


@pytest.mark.slow
async def test_a_fan_out_of_twenty_with_one_failure_and_its_rerun(session_id):
    asked: list[str] = []
    client = create_in_process_client(fact_model(asked))
    prompts = [f"topic {n}" for n in range(20)]
    results = await client.map(prompts, max_concurrency=5, session_id=session_id, output_type=Fact)
    assert [r.status for r in results].count("completed") == 19
    failed = results[13]
    assert failed.status == "failed"
    assert failed.error == "model: generate raised RuntimeError: the model is down for topic 13"
    for n, result in enumerate(results):
        assert result.session_id == f"{session_id}.{n}"
        if n != 13:
            assert result.output == Fact(topic=f"topic {n}", number=n), "results come in prompt order"
    assert sorted(asked) == sorted(prompts)

    asked.clear()
    again = await client.map(prompts, max_concurrency=5, session_id=session_id, output_type=Fact)
    assert asked == ["topic 13"], "the rerun replays the 19 finished runs without a model call"
    assert [r.output for r in again] == [r.output for r in results]
    assert all(r.metrics.replayed_turns == 1 for n, r in enumerate(again) if n != 13)


@pytest.mark.slow
async def test_a_member_that_raises_is_its_own_failed_result(session_id):
    class Raising(Client):
        async def run(self, prompt, toolkit=None, *, session_id=None, subflow=True, output_type=None):  # type: ignore[override]
            if prompt == "boom":
                raise OSError("no route to the model")
            return await super().run(prompt, toolkit, session_id=session_id, output_type=output_type)

    model = create_in_process_client(lambda request: f"echo {request.messages[-1].content}")
    client = Raising(model.transport, model.options)
    results = await client.map(["a", "boom", "c"], session_id=session_id)
    assert [(r.status, r.text, r.error) for r in results] == [
        ("completed", "echo a", None),
        ("failed", None, "OSError: no route to the model"),
        ("completed", "echo c", None),
    ]
    assert results[1].session_id == f"{session_id}.1"


@pytest.mark.slow
async def test_map_runs_at_most_max_concurrency_model_calls_at_once():
    running = 0
    peak = 0

    async def model(request: ModelRequest) -> str:
        """Until three calls overlapped, each waits for the others (runs start a while apart
        on a busy machine); then each holds on a moment, for a fourth to overlap if it can."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        with anyio.move_on_after(30):
            while peak < 3:
                await anyio.sleep(0.05)
        await anyio.sleep(1.0)
        running -= 1
        return "ok"

    results = await create_in_process_client(model).map([f"p{n}" for n in range(7)], max_concurrency=3)
    assert [r.status for r in results] == ["completed"] * 7
    assert peak == 3


@pytest.mark.slow
async def test_map_inside_a_flow_runs_sibling_subflows(session_id):
    """On the flow's task runner (Prefect's default, a pool of threads): each member's flow
    run is nested in a ``member-<session>`` task run of its own."""
    from prefect import flow

    @flow
    async def batch() -> list[RunResult]:
        client = create_in_process_client(lambda request: f"done {request.messages[-1].content}")
        return await client.map(["x", "y"], session_id=session_id)

    results = await batch()
    assert [r.text for r in results] == ["done x", "done y"]
    for n in range(2):
        nested = await flow_run_named(f"agent-{session_id}.{n}")
        assert nested.parent_task_run_id is not None
        tracking = await task_run(nested.parent_task_run_id)
        (member,) = tracking.task_inputs["__parents__"]
        assert (await task_run(member.id)).name == f"member-{session_id}.{n}"


async def test_a_bad_batch_id_or_concurrency_is_refused_before_anything_runs():
    from nexusflow import NexusflowError, SessionIdError

    client = create_in_process_client(ScriptedModel([]))
    with pytest.raises(SessionIdError):
        await client.map(["x"], session_id="../etc")
    with pytest.raises(NexusflowError, match="map: max_concurrency must be at least 1, got 0"):
        await client.map(["x"], max_concurrency=0)
