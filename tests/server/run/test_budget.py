"""Budgets over a run tree: a parent, its sub-agents and a fan-out spend from one budget,
stored with the parent's session, so a run killed and resumed continues the count."""

import os
import subprocess
import sys

import pytest

from nexusflow import RunResult, Toolkit, Usage, create_in_process_client, tool
from nexusflow.errors import ArgumentError
from nexusflow.state.budget import spent

from paths import HELPERS

pytestmark = [pytest.mark.anyio]

CENT = {"input_tokens": 100, "output_tokens": 10, "cost_usd": 0.01}
BUDGET_RUN = HELPERS / "budget_run.py"


def costs_a_cent(text: str):
    return lambda request: {"content": text, "usage": CENT}


@pytest.mark.slow  # several runs through the server: the fast tier stays under 90 s
async def test_sub_agents_and_a_fan_out_spend_from_the_parent_s_budget(session_id):
    reviewer = create_in_process_client(costs_a_cent("fine")).as_tool(name="reviewer", description="Review.")
    checker = create_in_process_client(costs_a_cent("true")).as_tool(name="checker", description="Check.")
    fan = create_in_process_client(costs_a_cent("found"))
    members: list[RunResult] = []

    @tool
    async def research() -> str:
        """Research three topics at once."""
        members.extend(await fan.map(["a", "b", "c"], max_concurrency=1, session_id=f"{session_id}.fan"))
        return ", ".join(member.status for member in members)

    def parent(request):
        turn = sum(m.role == "assistant" for m in request.messages)
        review, check = (
            {"name": "reviewer", "arguments": {"prompt": "x"}},
            {"name": "checker", "arguments": {"prompt": "y"}},
        )
        calls = [[review, check], [{"name": "research", "arguments": {}}]]
        if turn < 2:
            return {"tool_calls": calls[turn], "usage": CENT}
        return {"content": "never reached", "usage": CENT}

    client = create_in_process_client(parent, max_cost_usd=0.05)
    result = await client.run("go", Toolkit([reviewer, checker, research]), session_id=session_id)
    # parent 0.01, two sub-agents 0.02, parent 0.01, first fan-out member 0.01: then nothing more.
    assert [member.status for member in members] == ["completed", "failed", "failed"]
    assert members[1].error == f"budget: session {session_id} spent $0.05 of $0.05 (max_cost_usd)"
    assert result.status == "failed"
    assert result.error == f"budget: session {session_id} spent $0.05 of $0.05 (max_cost_usd)"
    assert result.error_type == "BudgetExceeded"
    assert (await spent(session_id)).cost_usd == pytest.approx(0.05)
    assert result.metrics.usage.cost_usd == pytest.approx(0.02), "the parent's own turns"


async def test_a_token_budget_stops_the_run_before_its_next_turn(session_id):
    calls = {"name": "reviewer", "arguments": {"prompt": "x"}}
    reviewer = create_in_process_client(costs_a_cent("fine")).as_tool(name="reviewer", description="Review.")
    client = create_in_process_client(lambda request: {"tool_calls": [calls], "usage": CENT}, max_tokens=300)
    result = await client.run("go", Toolkit([reviewer]), session_id=session_id)
    assert result.status == "failed"
    assert result.error == f"budget: session {session_id} spent 330 of 300 tokens (max_tokens)"
    assert result.metrics.turns == 2 and result.metrics.usage == Usage(
        input_tokens=200, output_tokens=20, cost_usd=0.02
    )


async def test_one_run_gets_a_budget_of_its_own_and_the_client_keeps_none(session_id):
    client = create_in_process_client(
        lambda request: {"tool_calls": [{"name": "step", "arguments": {}}], "usage": CENT}
    )

    @tool
    def step() -> str:
        """A step."""
        return "done"

    bounded = client.with_options(max_cost_usd=0.02)
    result = await bounded.run("go", Toolkit([step]), session_id=session_id)
    assert result.status == "failed" and result.error_type == "BudgetExceeded", result.error
    assert result.error == f"budget: session {session_id} spent $0.02 of $0.02 (max_cost_usd)"
    assert client.options.max_cost_usd is None and bounded.options.max_turns == client.options.max_turns
    with pytest.raises(ArgumentError, match="^with_options: max_cost_usd: input should be greater than 0"):
        client.with_options(max_cost_usd=0)
    with pytest.raises(ArgumentError, match="^with_options: max_turn is not an option"):
        client.with_options(max_turn=3)


@pytest.mark.slow
async def test_a_killed_run_resumed_continues_the_count(session_id):
    crashed = subprocess.run(
        [sys.executable, str(BUDGET_RUN), session_id, "--crash"], capture_output=True, text=True, env=dict(os.environ)
    )
    assert crashed.returncode == 17, crashed.stderr[-3000:]
    assert (await spent(session_id)).cost_usd == pytest.approx(0.02), "two turns were spent before the kill"
    resumed = subprocess.run(
        [sys.executable, str(BUDGET_RUN), session_id], capture_output=True, text=True, env=dict(os.environ)
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = RunResult.model_validate_json(resumed.stdout.strip().splitlines()[-1])
    # Turns 0 and 1 replay (not counted again), turn 2 is spent, turn 3 is refused.
    assert result.status == "failed", result.text
    assert result.error == f"budget: session {session_id} spent $0.03 of $0.03 (max_cost_usd)"
    assert result.metrics.replayed_turns == 2 and result.metrics.usage.cost_usd == pytest.approx(0.01)


async def test_a_resume_given_a_larger_budget_goes_on(session_id):
    def model(request):
        turn = sum(m.role == "assistant" for m in request.messages)
        if turn < 3:
            return {"tool_calls": [{"name": "noop", "arguments": {}}], "usage": CENT}
        return {"content": "done", "usage": CENT}

    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    first = await create_in_process_client(model, max_cost_usd=0.02).run("go", Toolkit([noop]), session_id=session_id)
    assert first.status == "failed" and first.error_type == "BudgetExceeded"
    again = await create_in_process_client(model, max_cost_usd=0.1).run("go", Toolkit([noop]), session_id=session_id)
    assert again.status == "completed", again.error
    assert (await spent(session_id)).cost_usd == pytest.approx(0.04)
