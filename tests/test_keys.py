"""A turn's cache key hashes what is new since the turn before, so its cost stays flat as a
run grows: counted in bytes serialised, not in time."""

import json

import pytest

import nexusflow.tasks.keys as keys
from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool

pytestmark = pytest.mark.anyio

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
