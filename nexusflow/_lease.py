"""One live run per session, across processes and machines.

The lock is a Prefect global concurrency limit of one slot per session, taken with a lease
(the server grants it atomically, whoever asks). A holder that is SIGKILLed never releases
it, and Prefect expires a lease only after a minute at the soonest; so the holder also
beats a small record in result storage. A contender that finds the slot taken watches that
record: if it changes, the holder is alive and the contender is refused; if it stays still
for ``STALE_AFTER`` seconds (measured on the contender's own clock, so machines' clocks may
disagree), the holder is dead and its lease is released by id, which can never release a
newer holder's lease.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.objects import ConcurrencyLeaseHolder
from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError
from prefect.filesystems import WritableFileSystem
from pydantic import BaseModel

from ._concurrency import ensure_limit
from ._digest import digest
from ._secrets import get_logger
from ._storage import read_record, step_storage, write_record
from .errors import SessionBusyError

logger = get_logger("nexusflow.session")

LEASE_SECONDS = 60.0
"""Prefect's shortest lease; renewed while the run lives."""
BEAT_SECONDS = 1.0
STALE_AFTER = 8.0


class Heartbeat(BaseModel):
    session_id: str
    flow_run_id: str
    lease_id: str
    beat: int


def limit_name(session_id: str) -> str:
    return f"nexusflow-session-{digest(session_id)}"


async def _try_acquire(client: PrefectClient, name: str, flow_run_id: str) -> str | None:
    holder = ConcurrencyLeaseHolder(type="flow_run", id=uuid.UUID(flow_run_id))
    try:
        response = await client.increment_concurrency_slots_with_lease(
            names=[name], slots=1, mode="concurrency", lease_duration=LEASE_SECONDS, holder=holder
        )
    except PrefectHTTPStatusError as exc:
        if exc.response.status_code == 423:
            return None
        raise
    return str(response.json()["lease_id"])


async def _release(client: PrefectClient, lease_id: str) -> None:
    try:
        await client.release_concurrency_slots_with_lease(uuid.UUID(lease_id))
    except (ObjectNotFound, PrefectHTTPStatusError):
        pass  # already expired or released


async def _acquire(client: PrefectClient, storage: WritableFileSystem, session_id: str, flow_run_id: str) -> str:
    """The lease id, once the slot is ours; ``SessionBusyError`` while a live run holds it."""
    name = limit_name(session_id)
    await ensure_limit(name, 1, client=client)
    first = True
    seen: Heartbeat | None = None
    since = time.monotonic()
    while True:
        lease_id = await _try_acquire(client, name, flow_run_id)
        if lease_id is not None:
            return lease_id
        beat = await read_record(Heartbeat, *_where(session_id), storage=storage)
        still = time.monotonic() - since
        if first or beat != seen:
            if not first and beat is not None:
                raise SessionBusyError(session_id, beat.flow_run_id)  # it beat while we watched
            first, seen, since = False, beat, time.monotonic()
        elif beat is not None and still >= STALE_AFTER:
            logger.warning(
                'session "%s": flow run %s has not beaten for %.0fs (it crashed): taking the session over',
                session_id,
                beat.flow_run_id,
                still,
            )
            await _release(client, beat.lease_id)
            first = True
            continue
        elif beat is None and still >= LEASE_SECONDS + 30:
            raise SessionBusyError(session_id, "unknown")  # a holder that never beat: Prefect expires it
        await anyio.sleep(BEAT_SECONDS / 2)


@asynccontextmanager
async def session_lease(session_id: str, flow_run_id: str) -> AsyncIterator[None]:
    """Hold the session for the body; beat while it runs; release on every way out. The
    beat is a plain background task, not a task group: a group would wrap what the body
    raises, and Prefect must see its own suspension exception as it is."""
    storage = await step_storage()
    async with get_client() as client:
        lease_id = await _acquire(client, storage, session_id, flow_run_id)
        try:
            first = Heartbeat(session_id=session_id, flow_run_id=flow_run_id, lease_id=lease_id, beat=0)
            await write_record(first, *_where(session_id), storage=storage)
            beating = asyncio.create_task(_beat(client, storage, first))
            try:
                yield
            finally:
                beating.cancel()
                with anyio.CancelScope(shield=True):
                    await asyncio.gather(beating, return_exceptions=True)
        finally:
            with anyio.CancelScope(shield=True):
                await _release(client, lease_id)


def _where(session_id: str) -> tuple[str, str, str]:
    return ("sessions", session_id, "lease.json")


async def _beat(client: PrefectClient, storage: WritableFileSystem, heartbeat: Heartbeat) -> None:
    renewed = time.monotonic()
    session = heartbeat.session_id
    while True:
        await anyio.sleep(BEAT_SECONDS)
        heartbeat = heartbeat.model_copy(update={"beat": heartbeat.beat + 1})
        try:
            await write_record(heartbeat, *_where(heartbeat.session_id), storage=storage)
            if time.monotonic() - renewed > LEASE_SECONDS / 3:
                await client.renew_concurrency_lease(uuid.UUID(heartbeat.lease_id), lease_duration=LEASE_SECONDS)
                renewed = time.monotonic()
        except Exception as exc:
            logger.warning('session "%s": could not beat its lease: %s', session, exc)
