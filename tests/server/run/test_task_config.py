"""Per-kind task options reach the steps' Prefect tasks; retries only where they are safe."""

from __future__ import annotations

import anyio
import pytest
from pydantic import ValidationError

from nexusflow import POSITIONAL_KEY, ModelRequest, StepOptions, TaskConfig, create_in_process_client
from nexusflow.tasks import model_turn, tool_call

pytestmark = [pytest.mark.anyio]


async def test_a_turn_retried_by_its_task_options_completes(session_id):
    attempts: list[int] = []

    def flaky(request: ModelRequest) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("a passing hiccup")
        return "steady"

    client = create_in_process_client(flaky, task_config=TaskConfig(turn=StepOptions(retries=1)))
    result = await client.run("go", session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "steady" and len(attempts) == 2


async def test_a_turn_over_its_timeout_fails_the_run(session_id):
    async def slow(request: ModelRequest) -> str:
        await anyio.sleep(30)
        return "late"

    client = create_in_process_client(slow, task_config=TaskConfig(turn=StepOptions(timeout_seconds=1)))
    with anyio.fail_after(60):
        result = await client.run("go", session_id=session_id)
    assert result.status == "failed"
    assert result.error is not None and "timed out" in result.error.lower(), result.error


def test_tool_and_wait_steps_refuse_prefect_retries():
    with pytest.raises(ValidationError, match="tool steps take no Prefect retries"):
        TaskConfig(tool=StepOptions(retries=2))
    with pytest.raises(ValidationError, match="wait steps take no Prefect retries"):
        TaskConfig(wait={"retries": 1})


def test_every_step_is_keyed_by_the_positional_policy():
    assert model_turn.cache_policy is POSITIONAL_KEY and tool_call.cache_policy is POSITIONAL_KEY
