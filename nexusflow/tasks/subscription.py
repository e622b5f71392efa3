"""A client's subscription limit, as a model turn holds it: a slot of ``max_concurrent``
(``nexusflow._prefect.locks``: freed when its holder crashes, wherever the server lives), a start
of ``per_minute`` (a Prefect rate limit, made sure of by ``nexusflow._prefect.concurrency``), and
the spent quota a run met, kept until its reset in a Prefect variable, so that no run on any
worker asks the subscription again before then."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from prefect.concurrency.asyncio import rate_limit
from prefect.variables import Variable

from .._prefect.concurrency import ensure_limit
from .._prefect.locks import slot
from ..config.subscription import SubscriptionLimit
from ..errors import QuotaExhausted


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


async def known_spent(limit: SubscriptionLimit) -> None:
    """Raise the spent quota a run recorded for the subscription, while its window lasts."""
    value = await Variable.aget(limit.quota_name)
    if not isinstance(value, dict) or not isinstance(value.get("resets_at"), str):
        return
    resets_at = datetime.fromisoformat(value["resets_at"])
    if resets_at > datetime.now(UTC):
        said = f"recorded for subscription {limit.name}: {value.get('said') or ''}".strip()
        raise QuotaExhausted(str(value.get("style") or limit.name), resets_at, said)


async def record_spent(limit: SubscriptionLimit, exc: QuotaExhausted, quota_wait: float) -> None:
    """Keep the spent quota until its reset (``quota_wait`` from now when the CLI said none)."""
    value = {"style": exc.style, "resets_at": exc.reset_after(quota_wait).isoformat(), "said": exc.said[-300:]}
    await Variable.aset(limit.quota_name, value, overwrite=True)
