"""A spent quota that no fallback got around: the run waits for the window's reset, or
fails (``on_quota``). Waiting is durable: the turn that met the quota wrote no record, so
it is asked again after the reset, and the finished steps before it replay."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import anyio
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.exceptions import Pause
from prefect.states import Scheduled
from prefect.utilities.engine import propose_state

from ..config.options import ClientOptions
from ..errors import QuotaExhausted

AWAITING_QUOTA = "AwaitingQuota"
"""The name of the Scheduled state a deployment's run waits for its quota's reset in."""


def reset_of(exc: QuotaExhausted, options: ClientOptions) -> datetime | None:
    """When to ask again under the ``wait`` policy, or None when the run fails instead: the
    reset the CLI stated, else ``quota_wait`` from now; none further off than ``max_quota_wait``."""
    if options.on_quota != "wait":
        return None
    until = exc.reset_after(options.quota_wait)
    return until if (until - datetime.now(UTC)).total_seconds() <= options.max_quota_wait else None


async def wait_until(until: datetime, leaving: Callable[[], Awaitable[None]]) -> None:
    """A deployment's run goes back to ``Scheduled`` at ``until`` and its process ends, so
    the worker is free meanwhile: the worker starts it again then, and it replays its
    finished steps. ``leaving`` is awaited first, to say so where the session's status is
    read (else a run whose lease stopped beating looks crashed, and ``prune`` deletes it).
    Any other run sleeps in its process, its lease beating."""
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None or run.deployment_id is None:
        await anyio.sleep(max(0.0, (until - datetime.now(UTC)).total_seconds()))
        return
    await leaving()
    async with get_client() as client:
        state = await propose_state(client, Scheduled(scheduled_time=until, name=AWAITING_QUOTA), flow_run_id=run.id)
    raise Pause(state=state)
