"""A deployment's flow run created at most once for one purpose, however many callers ask."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.actions import DeploymentFlowRunCreate
from prefect.client.schemas.objects import FlowRun
from prefect.states import Scheduled, to_state_create


async def create_once(
    client: PrefectClient, deployment_id: UUID, parameters: dict[str, Any], key: str
) -> tuple[FlowRun, bool]:
    """The flow run of ``deployment_id`` for ``key`` and whether this call created it. The
    server keeps one flow run per idempotency key and answers 201 only to the call that
    created it (an existing one comes back with 200), so two callers at once cannot both
    start it; the client's own method hides which it was."""
    create = DeploymentFlowRunCreate(parameters=parameters, state=to_state_create(Scheduled()), idempotency_key=key)
    response = await client.request(
        "POST",
        "/deployments/{id}/create_flow_run",
        path_params={"id": deployment_id},
        json=create.model_dump(mode="json", exclude_unset=True),
    )
    return FlowRun.model_validate(response.json()), response.status_code == 201
