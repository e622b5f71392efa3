"""Print a session's flow runs (oldest first) as JSON: each one's id, state, message and
its task runs' states. Run in the home whose server holds them (an embedded default)."""

from __future__ import annotations

import asyncio
import json
import sys

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterName


async def main(session_id: str) -> None:
    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[f"agent-{session_id}"]))
        )
        found = []
        for run in sorted(runs, key=lambda run: run.created or 0):
            tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
            found.append(
                {
                    "id": str(run.id),
                    "state": run.state.type.value if run.state else None,
                    "message": run.state.message if run.state else None,
                    "tasks": {task.name: task.state.type.value if task.state else None for task in tasks},
                }
            )
    print(json.dumps(found))


if __name__ == "__main__":
    from nexusflow._prefect.server import use_server

    use_server()  # the embedded server's quiet, patient settings
    asyncio.run(main(sys.argv[1]))
