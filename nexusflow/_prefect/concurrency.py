"""Prefect global concurrency limits, made sure of once per process: a subscription's rate
limit (its slots and a tool's are ``nexusflow._prefect.locks``, which exist only while held)."""

from __future__ import annotations

from prefect.client.orchestration import PrefectClient, get_client
from prefect.exceptions import ObjectAlreadyExists

_made: set[tuple[str, int, float | None]] = set()


async def ensure_limit(
    name: str, limit: int, slot_decay_per_second: float | None = None, *, client: PrefectClient | None = None
) -> None:
    """Create the limit, or resize the one there. A read comes first (an upsert): creating
    a limit that exists costs one request less but makes the server log a traceback."""
    wanted = (name, limit, slot_decay_per_second)
    if wanted in _made:
        return
    if client is None:
        async with get_client() as own:
            await _ensure(own, name, limit, slot_decay_per_second)
    else:
        await _ensure(client, name, limit, slot_decay_per_second)
    _made.add(wanted)


async def _ensure(client: PrefectClient, name: str, limit: int, slot_decay_per_second: float | None) -> None:
    try:
        await client.upsert_global_concurrency_limit_by_name(name, limit, slot_decay_per_second)
    except ObjectAlreadyExists:  # another process created it between our read and our create
        await client.upsert_global_concurrency_limit_by_name(name, limit, slot_decay_per_second)
