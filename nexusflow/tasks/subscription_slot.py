"""A client's subscription limit, as a model turn holds it: a slot of ``max_concurrent``
(``nexusflow._locks``: freed when its holder crashes, wherever the server lives) and a start
of ``per_minute`` (a Prefect rate limit, made sure of by ``nexusflow._concurrency``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prefect.concurrency.asyncio import rate_limit

from .._concurrency import ensure_limit
from .._locks import slot
from ..subscription import SubscriptionLimit


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
    async with slot(limit.concurrency_name, limit.max_concurrent):
        yield
