"""An answer is taken once, however many send it at once: a deployment's answered run is
created once per request (the server's idempotency key), and an answer to a session of
``nexusflow mcp``'s own agent is claimed once (a Prefect Variable), a dead claimer's claim
taken over so that a crash never leaves a request nobody can answer."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import VariableCreate

from nexusflow._prefect import answer_claims as claims
from nexusflow._prefect.deployments import create_once
from nexusflow._support.liveness import process_mark

pytestmark = [pytest.mark.anyio]


async def test_a_deployments_run_for_one_key_is_created_once_by_one_of_many_callers(session_id):
    async with get_client() as client:
        flow_id = await client.create_flow_from_name(f"answer-once-{session_id}")
        deployment = await client.create_deployment(flow_id=flow_id, name="answered")
        made: list[tuple[str, bool]] = []

        async def one() -> None:
            run, created = await create_once(client, deployment, {"n": 1}, f"nexusflow-answer-{session_id}")
            made.append((str(run.id), created))

        async with anyio.create_task_group() as group:
            for _ in range(6):
                group.start_soon(one)
    assert sorted(created for _, created in made) == [False] * 5 + [True]
    assert len({run for run, _ in made}) == 1


async def test_a_request_is_claimed_once_of_many_at_once_and_a_released_claim_frees_it(session_id):
    async with get_client() as client:
        got = []

        async def one() -> None:
            got.append(await claims.claim(client, session_id, "r1"))

        async with anyio.create_task_group() as group:
            for _ in range(6):
                group.start_soon(one)
        won = [claim for claim in got if claim is not None]
        assert len(won) == 1, got
        assert await claims.claim(client, session_id, "r1") is None, "a live claimer's claim is taken"
        assert await claims.claim(client, session_id, "r2") is not None, "another request is another claim"
        await claims.release(client, won[0])
        await claims.release(client, won[0])  # a late release of a claim gone changes nothing
        assert await claims.claim(client, session_id, "r1") is not None


async def test_a_dead_claimers_claim_is_taken_over_and_a_foreign_one_is_not(session_id):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)
    mark = process_mark(__import__("os").getpid())
    assert mark is not None
    gone = mark.model_copy(update={"pid": dead})
    async with get_client() as client:
        left = claims.Claim(session_id=session_id, request_id="r1", process=gone)
        name = claims.claim_name(session_id, "r1")
        await client.create_variable(VariableCreate(name=name, value=left.model_dump(mode="json")))
        assert await claims.claim(client, session_id, "r1") is not None, "a crashed claimer's claim stays"
        foreign = mark.model_copy(update={"machine": "another-machine/boot/1", "pid": dead})
        elsewhere = claims.Claim(session_id=session_id, request_id="r2", process=foreign)
        await client.create_variable(
            VariableCreate(name=claims.claim_name(session_id, "r2"), value=elsewhere.model_dump(mode="json"))
        )
        assert await claims.claim(client, session_id, "r2") is None, "a claim from another machine was taken"


async def test_forget_deletes_the_claims_a_killed_claimer_left(session_id):
    from nexusflow.ops.sessions import forget_session

    async with get_client() as client:
        assert await claims.claim(client, session_id, "r1") is not None
        assert await claims.claim(client, session_id, "r2") is not None
        other = f"{session_id}-other"
        assert await claims.claim(client, other, "r1") is not None
        await forget_session(session_id)
        assert await claims.forget_claims(client, session_id) == 0, "a claim of the forgotten session stays"
        assert await claims.forget_claims(client, other) == 1, "another session's claim went with it"
