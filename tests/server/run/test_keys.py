"""Costs that stay flat as a run grows, counted in work done, not in time: a turn's cache key
hashes what is new since the turn before, and the end of a run does not walk the transcript."""

import json

import prefect.futures
import prefect.utilities.collections
import pytest
from prefect.flow_engine import AsyncFlowRunEngine

import nexusflow.tasks.keys as keys
from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool

pytestmark = [pytest.mark.anyio]

TURNS = 30


@tool
def note(step: int) -> str:
    """Returns a line of the same length at every step."""
    return f"noted step {step:03d}"


def model(request: ModelRequest):
    step = sum(m.role == "assistant" for m in request.messages)
    if step < TURNS - 1:
        return {"tool_calls": [{"name": "note", "arguments": {"step": 100 + step}}]}
    return "done"


@pytest.mark.slow
async def test_the_turn_key_hashes_the_same_bytes_at_turn_29_as_at_turn_2(monkeypatch, session_id):
    hashed: dict[int, int] = {}
    real = keys.step_key

    def counted(session: str, step: int, kind: str, call: int, inputs):
        if kind == "turn":
            hashed[step] = len(json.dumps(inputs, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
        return real(session, step, kind, call, inputs)

    monkeypatch.setattr(keys, "step_key", counted)
    async with await Toolkit.load(tools=[note]) as toolkit:
        result = await create_in_process_client(model, max_turns=TURNS).run("go", toolkit, session_id=session_id)
    assert result.status == "completed" and result.metrics.turns == TURNS, result.error
    transcript = len(json.dumps([m.model_dump(mode="json") for m in result.messages]))
    assert hashed[TURNS - 1] <= hashed[2] + 2, hashed  # the previous key names a two-digit step
    assert hashed[TURNS - 1] * 10 < transcript, "a turn hashes its new messages, not the transcript"


@pytest.mark.slow
async def test_the_end_of_a_run_visits_as_many_objects_at_30_turns_as_at_2(monkeypatch, session_id):
    """Prefect walks a flow's return value for futures, object by object (12-40 ms at 200
    turns): the run's result reaches the client without a walk through its transcript."""
    walk = {"on": False, "visited": 0}
    real_visit = prefect.utilities.collections.visit_collection
    real_success = AsyncFlowRunEngine.handle_success

    def counted(*args, **kwargs):
        walk["visited"] += walk["on"]
        return real_visit(*args, **kwargs)

    async def handle_success(self, result):
        walk["on"] = True
        try:
            return await real_success(self, result)
        finally:
            walk["on"] = False

    monkeypatch.setattr(prefect.utilities.collections, "visit_collection", counted)
    monkeypatch.setattr(prefect.futures, "visit_collection", counted)
    monkeypatch.setattr(AsyncFlowRunEngine, "handle_success", handle_success)
    visited: dict[int, int] = {}
    async with await Toolkit.load(tools=[note]) as toolkit:
        for turns in (2, TURNS):
            walk["visited"] = 0

            def model(request: ModelRequest, turns=turns):
                step = sum(m.role == "assistant" for m in request.messages)
                return {"tool_calls": [{"name": "note", "arguments": {"step": step}}]} if step < turns - 1 else "done"

            client = create_in_process_client(model, max_turns=TURNS)
            result = await client.run("go", toolkit, session_id=f"{session_id}-{turns}")
            assert result.status == "completed" and len(result.messages) == 2 * turns, result.error
            visited[turns] = walk["visited"]
    assert 0 < visited[TURNS] == visited[2], visited
