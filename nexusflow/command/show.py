"""``nexusflow show``: a past run's transcript and steps."""

from __future__ import annotations

from uuid import UUID

from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterName,
)
from prefect.client.schemas.objects import FlowRun
from prefect.client.schemas.sorting import ArtifactSort, FlowRunSort, TaskRunSort
from prefect.exceptions import ObjectNotFound

from .._prefect.artifact_keys import keys_of
from .._prefect.server import use_server
from .errors import usage_no_run


async def transcript_of(client: PrefectClient, session: str, runs: list[FlowRun]) -> str | None:
    """The session's latest transcript, from its own flow runs: never another session's
    whose id folds to the same artifact key (``Mix_N``, ``mix-n``)."""
    found = await client.read_artifacts(
        artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys_of(session, ("transcript",)))),
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id for run in runs])),
        sort=ArtifactSort.CREATED_DESC,
        limit=1,
    )
    return str(found[0].data) if found else None


async def runs_of(client: PrefectClient, run_id: str) -> list[FlowRun]:
    """The flow run with this id, else the runs of the session with this id, oldest first."""
    try:
        return [await client.read_flow_run(UUID(run_id))]
    except (ValueError, ObjectNotFound):
        pass
    name = FlowRunFilter(name=FlowRunFilterName(any_=[f"agent-{run_id}"]))
    return await client.read_flow_runs(flow_run_filter=name, sort=FlowRunSort.START_TIME_ASC)


async def show(run_id: str, /) -> int:
    """A past run's transcript and the steps of each of its flow runs.

    Parameters
    ----------
    run_id
        A session id, or a flow run id.
    """
    use_server()
    async with get_client() as client:
        runs = await runs_of(client, run_id)
        if not runs:
            raise usage_no_run(run_id)
        session = runs[-1].parameters.get("session_id") or f"job-{runs[-1].id}"
        transcript = await transcript_of(client, str(session), runs)
        print(transcript if transcript is not None else f"(no transcript for session {session})")
        for flow_run in runs:
            print(f"\nflow run {flow_run.name} ({flow_run.id}): {flow_run.state_name}")
            steps = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id]))
            for task_run in await client.read_task_runs(
                flow_run_filter=steps, sort=TaskRunSort.EXPECTED_START_TIME_ASC
            ):
                seconds = task_run.total_run_time.total_seconds()
                print(f"  {task_run.name:<40} {task_run.state_name or '':<16} {seconds:8.2f}s")
    return 0
