"""Prefect global concurrency limits, as the tasks hold them: a tool policy's
``concurrency`` around a tool call, a client's subscription limit around a model turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from prefect.client.orchestration import get_client
from prefect.concurrency.asyncio import concurrency, rate_limit
from prefect.exceptions import ObjectAlreadyExists

from ..limits import SubscriptionLimit

_limits_set: set[tuple[str, int, float | None]] = set()
_limits_lock = anyio.Lock()


async def ensure_limit(name: str, limit: int, slot_decay_per_second: float | None = None) -> None:
    """Create or resize the global concurrency limit once per process (a second process
    creating it at the same moment makes the first upsert fail: the second one updates)."""
    wanted = (name, limit, slot_decay_per_second)
    async with _limits_lock:
        if wanted in _limits_set:
            return
        async with get_client() as client:
            try:
                await client.upsert_global_concurrency_limit_by_name(name, limit, slot_decay_per_second)
            except ObjectAlreadyExists:
                await client.upsert_global_concurrency_limit_by_name(name, limit, slot_decay_per_second)
        _limits_set.add(wanted)


@asynccontextmanager
async def subscription_slot(limit: SubscriptionLimit | None) -> AsyncIterator[None]:
    """One turn's share of its subscription: a slot of ``max_concurrent`` held for the
    call, and one start of ``per_minute``, taken once the slot is held so that a turn
    starts when its start is counted (a rate slot taken first could wait for a
    concurrency slot and start in a burst with others)."""
    if limit is None:
        yield
        return
    async with _concurrent(limit):
        if limit.per_minute is not None:
            # A burst of one: starts are spaced 60 / per_minute seconds apart.
            await ensure_limit(limit.rate_name, 1, limit.per_minute / 60)
            await rate_limit(limit.rate_name, occupy=1, strict=True)
        yield


@asynccontextmanager
async def _concurrent(limit: SubscriptionLimit) -> AsyncIterator[None]:
    if limit.max_concurrent is None:
        yield
        return
    await ensure_limit(limit.concurrency_name, limit.max_concurrent)
    async with concurrency(limit.concurrency_name, occupy=1, strict=True):
        yield
