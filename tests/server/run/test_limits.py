"""Subscription limits (``limit=``, ``max_concurrent=``, ``per_minute=``), held on the
session's server (slots as ``nexusflow._prefect.locks``, starts as a Prefect rate limit): runs
gathered in one process share them as runs on several workers do (tests/topology/test_topology.py has
the two-worker case; tests/homes/test_server_places.py a slot whose holder was killed)."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound

from nexusflow import (
    CliStyles,
    ModelReply,
    ModelRequest,
    RunResult,
    SubscriptionLimit,
    SubscriptionLimitError,
    create_cli_client,
    create_in_process_client,
)
from nexusflow._prefect.locks import slot
from nexusflow.command import UsageError
from nexusflow.command.invocation import load_invocation
from nexusflow.command.run import run as run_command

from helpers.intervals import most_in_flight

pytestmark = [pytest.mark.anyio]


class Timed:
    """A model whose turns record when they ran. A turn lasts ``seconds``, and longer (up
    to ``patience``) while some of the ``runs`` have not reached their turn yet: on a busy
    machine their starts are spread, and unlimited turns must not miss each other. A run
    has reached its turn when its ``before_llm`` hook ran, before any slot is taken."""

    def __init__(self, seconds: float, runs: int = 0, patience: float = 10) -> None:
        self.seconds = seconds
        self.runs = runs
        self.patience = patience
        self.arrived = 0
        self.intervals: list[tuple[float, float]] = []

    def arrive(self, request: ModelRequest) -> None:
        self.arrived += 1

    async def __call__(self, request: ModelRequest) -> ModelReply:
        started = time.monotonic()
        await anyio.sleep(self.seconds)
        while self.arrived < self.runs and time.monotonic() - started < self.patience:
            await anyio.sleep(0.02)
        self.intervals.append((started, time.monotonic()))
        return ModelReply(content="done")


async def gathered(model: Timed, runs: int, session_id: str, **options: Any) -> list[RunResult]:
    client = create_in_process_client(model, before_llm=model.arrive, **options)
    results: list[RunResult] = []

    async def one(n: int) -> None:
        results.append(await client.run("go", session_id=f"{session_id}-{n}"))

    async with anyio.create_task_group() as group:
        for n in range(runs):
            group.start_soon(one, n)
    assert [r.status for r in results] == ["completed"] * runs, [r.error for r in results]
    return results


def unique(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


@pytest.mark.slow
async def test_six_runs_keep_at_most_max_concurrent_turns_in_flight(session_id):
    model = Timed(0.4, runs=6)
    await gathered(model, 6, session_id, limit=unique("two"), max_concurrent=2)
    assert len(model.intervals) == 6
    assert most_in_flight(model.intervals) == 2, model.intervals


@pytest.mark.slow
async def test_without_a_limit_the_same_runs_overlap_more(session_id):
    """The control of the test above: unlimited, more than two turns run at once."""
    model = Timed(0.4, runs=6)
    await gathered(model, 6, session_id)
    assert most_in_flight(model.intervals) > 2, model.intervals


@pytest.mark.slow
async def test_per_minute_spaces_the_starts_of_turns(session_id):
    """120 a minute: one start every 0.5 s, so four turns cannot all start within 1.5 s
    (unlimited, they start within a few hundredths). An ordering guarantee, generously
    checked, not a speed figure."""
    model = Timed(0.0)
    await gathered(model, 4, session_id, limit=unique("rate"), per_minute=120)
    starts = sorted(start for start, _ in model.intervals)
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert min(gaps) > 0.4, gaps


@pytest.mark.slow
async def test_a_replayed_turn_takes_no_slot_and_a_new_one_waits_for_it(session_id):
    """With the one slot held elsewhere, a finished session replays at once (its turn does
    not call the model), while a new session's turn waits until the slot is free."""
    name = unique("one")
    limit = SubscriptionLimit(name=name, max_concurrent=1)
    model = Timed(0.0)
    client = create_in_process_client(model, limit=name, max_concurrent=1)
    assert (await client.run("go", session_id=session_id)).status == "completed"

    waiting: list[RunResult] = []
    async with anyio.create_task_group() as group:
        async with slot(limit.concurrency_name, 1):
            with anyio.fail_after(60):
                replayed = await client.run("go", session_id=session_id)
            assert replayed.status == "completed" and replayed.metrics.replayed_turns == 1

            async def fresh() -> None:
                waiting.append(await client.run("go", session_id=f"{session_id}-new"))

            group.start_soon(fresh)
            await anyio.sleep(3)
            assert len(model.intervals) == 1 and not waiting, "the new turn ran while the slot was held"
    assert waiting[0].status == "completed" and len(model.intervals) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"limit": "claude max", "max_concurrent": 2}, "limit: invalid name 'claude max': use 1-100 letters"),
        ({"limit": "claude-max"}, 'limit "claude-max": give max_concurrent, per_minute or both'),
        ({"max_concurrent": 2}, "limit: max_concurrent and per_minute need a limit name"),
        ({"per_minute": 30}, "limit: max_concurrent and per_minute need a limit name"),
        ({"limit": "x", "max_concurrent": 0}, 'limit "x": max_concurrent must be a positive integer, not 0'),
        ({"limit": "x", "max_concurrent": 1.5}, 'limit "x": max_concurrent must be a positive integer, not 1.5'),
        ({"limit": "x", "per_minute": -30}, 'limit "x": per_minute must be a positive number, not -30'),
    ],
)
def test_a_limit_that_cannot_be_held_is_refused_in_one_line(options, message):
    for create in (
        lambda: create_in_process_client(lambda r: "hi", **options),
        lambda: create_cli_client(CliStyles.CLAUDE, "claude", **options),
    ):
        with pytest.raises(SubscriptionLimitError) as caught:
            create()
        assert str(caught.value).startswith(message)
        assert "\n" not in str(caught.value)


async def test_nexusflow_run_takes_the_limit_and_keeps_it_for_the_answer(session_id):
    with pytest.raises(UsageError, match="limit: max_concurrent and per_minute need a limit name"):
        await run_command("hi", max_concurrent=2)
    name = unique("cli")
    assert await run_command("hi", session=session_id, limit=name, max_concurrent=1, per_minute=600) == 0
    kept = await load_invocation(session_id)
    assert kept is not None and (kept.limit, kept.max_concurrent, kept.per_minute) == (name, 1, 600)
    async with get_client() as client:  # the run's turn took a start; its slot exists only while held
        rate = await client.read_global_concurrency_limit_by_name(f"nexusflow-subscription-{name}-rate")
        with pytest.raises(ObjectNotFound):
            await client.read_global_concurrency_limit_by_name(f"nexusflow-subscription-{name}-slot-0")
    assert (rate.limit, rate.slot_decay_per_second) == (1, 10)
