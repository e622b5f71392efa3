"""Reading what the Prefect server recorded. Task-run states reach the server through its
event pipeline, a moment after the flow returns, so reads wait until the runs are there."""

from __future__ import annotations

import time
from uuid import UUID

import anyio
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.client.schemas.objects import FlowRun, TaskRun


async def task_runs(flow_run_id: str, expected: int, timeout: float = 60) -> list[TaskRun]:
    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(flow_run_id)]))
            )
            done = [run for run in runs if run.state is not None and run.state.is_final()]
            if len(done) >= expected or time.monotonic() > deadline:
                return sorted(runs, key=lambda run: (run.expected_start_time or run.created, run.name))
            await anyio.sleep(0.5)


async def flow_run(flow_run_id: str) -> FlowRun:
    async with get_client() as client:
        return await client.read_flow_run(UUID(flow_run_id))


async def task_run(task_run_id: UUID) -> TaskRun:
    async with get_client() as client:
        return await client.read_task_run(task_run_id)
