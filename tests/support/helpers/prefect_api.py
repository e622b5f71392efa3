"""Reading what the Prefect server recorded. Task-run states and logs reach the server through
its event pipeline and log batches, a moment after the flow returns, so reads wait until
they are there."""

from __future__ import annotations

import time
from uuid import UUID

import anyio
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    LogFilter,
    LogFilterFlowRunId,
    LogFilterTaskRunId,
)
from prefect.client.schemas.objects import FlowRun, TaskRun
from prefect.events import Event
from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter
from prefect.exceptions import ObjectNotFound


async def task_runs(
    flow_run_id: str, expected: int, timeout: float = 60, including: tuple[str, ...] = ()
) -> list[TaskRun]:
    """Wait until `expected` task runs, and those named in `including`, are final.

    Prefect writes task runs from events, so a count alone can be met by other runs first.
    """
    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(flow_run_id)]))
            )
            done = [run for run in runs if run.state is not None and run.state.is_final()]
            named = {run.name for run in done}
            if (len(done) >= expected and named.issuperset(including)) or time.monotonic() > deadline:
                return sorted(runs, key=lambda run: (run.expected_start_time or run.created, run.name))
            await anyio.sleep(0.5)


async def flow_run(flow_run_id: str) -> FlowRun:
    async with get_client() as client:
        return await client.read_flow_run(UUID(flow_run_id))


async def task_run(task_run_id: UUID, timeout: float = 60) -> TaskRun:
    """A task run by id, once the server has recorded it: a run that has returned can have
    task runs whose creation events are still on their way (CI saw it twice)."""
    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            try:
                return await client.read_task_run(task_run_id)
            except ObjectNotFound:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.5)


def by_name(runs: list[TaskRun]) -> dict[str, TaskRun]:
    named = {run.name: run for run in runs}
    assert len(named) == len(runs), f"task run names repeat: {sorted(run.name for run in runs)}"
    return named


async def task_run_log_lines(run: TaskRun) -> list[str]:
    """The task run's log lines on the server now, in order (more may be on their way)."""
    task_run = LogFilter(task_run_id=LogFilterTaskRunId(any_=[UUID(str(run.id))]))
    async with get_client() as client:
        found = await client.read_logs(log_filter=task_run)
    return [log.message for log in sorted(found, key=lambda log: log.timestamp)]


async def task_run_logs(run: TaskRun, timeout: float = 30) -> list[str]:
    """The task run's own log lines, without Prefect's last one (``Finished in state ...``),
    which says they are all there: logs reach the server in batches, a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        lines = await task_run_log_lines(run)
        if any(line.startswith("Finished in state") for line in lines) or time.monotonic() > deadline:
            return [line for line in lines if not line.startswith("Finished in state")]
        await anyio.sleep(0.5)


async def flow_run_logs(flow_run_id: str, needle: str, timeout: float = 30) -> list[tuple[int, str]]:
    """The flow run's log lines (level, message), once one contains ``needle``."""
    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            found = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(flow_run_id)]))
            )
            lines = [(log.level, log.message) for log in found]
            if any(needle in message for _, message in lines) or time.monotonic() > deadline:
                return lines
            await anyio.sleep(0.5)


async def events_of(session_id: str, expected: int, timeout: float = 60) -> list[Event]:
    """The session's nexusflow events, oldest first, once ``expected`` of them are stored."""
    wanted = EventFilter(
        event=EventNameFilter(prefix=["nexusflow."]),
        resource=EventResourceFilter(id=[f"nexusflow.session.{session_id}"]),
    )
    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            page = await client.read_events(filter=wanted, limit=50)
            if len(page.events) >= expected or time.monotonic() > deadline:
                return sorted(page.events, key=lambda event: event.occurred)
            await anyio.sleep(0.5)
