"""One live run per session, across processes, machines and server restarts.

The lock is a Prefect global concurrency limit named for the session that exists only while
a run holds the session. Creating it takes the session: a name is unique, so the server
grants it to one contender. Deleting it by its id lets go: an id is never reused, so a late
delete can never free a newer holder's lock. The lock lives in the server's database and
nowhere else. Prefect's own concurrency leases live in the server process's memory by
default, so a server restart, an upgrade, or the embedded server of another process loses
them while the slot stays taken in the database: a session locked that way never ran again.

A holder that is SIGKILLed never deletes its lock, so it also beats a small record in result
storage. A contender that finds the lock watches that record. A new beat that names the lock
means the holder is alive, and the contender is refused. No such beat for ``STALE_AFTER``
seconds (on the contender's own clock, so machines' clocks may disagree) means the holder is
gone: the contender deletes that lock by its id and tries again. When two contenders race,
one creates the new lock and the other finds it held and beating.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.client.schemas.responses import GlobalConcurrencyLimitResponse
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.filesystems import WritableFileSystem
from pydantic import BaseModel

from ._digest import digest
from ._secrets import get_logger
from ._storage import read_record, step_storage, write_record
from .errors import SessionBusyError, SessionLockError, SessionTakenOverError

logger = get_logger("nexusflow.session")

BEAT_SECONDS = 1.0
STALE_AFTER = 8.0
"""Seconds without a beat after which a contender takes the session over."""
GIVE_UP_AFTER = 30.0
"""Seconds after which a contender that holds nothing and was refused by no live holder
fails with ``SessionLockError``: time for three take-overs in a row."""

LOCK_PREFIX = "nexusflow-session-"


class Heartbeat(BaseModel):
    session_id: str
    flow_run_id: str
    lock_id: str | None = None
    """The lock its holder created (absent from the records of nexusflow's earlier leases)."""
    beat: int


def lock_name(session_id: str) -> str:
    return f"{LOCK_PREFIX}{digest(session_id)}"


async def _held(client: PrefectClient, name: str) -> GlobalConcurrencyLimitResponse | None:
    try:
        return await client.read_global_concurrency_limit_by_name(name)
    except ObjectNotFound:
        return None


async def _create(client: PrefectClient, name: str) -> uuid.UUID | None:
    """The new lock's id, or None when another contender created it first. A read comes
    first in ``_acquire``: a create that conflicts makes the server log a traceback."""
    try:
        return await client.create_global_concurrency_limit(
            GlobalConcurrencyLimitCreate(name=name, limit=1, active_slots=1)
        )
    except ObjectAlreadyExists:
        return None


async def _delete(client: PrefectClient, lock_id: uuid.UUID) -> bool:
    """Whether this call deleted the lock (the route takes an id as well as a name)."""
    try:
        await client.delete_global_concurrency_limit_by_name(str(lock_id))
    except ObjectNotFound:
        return False
    return True


async def _acquire(client: PrefectClient, storage: WritableFileSystem, session_id: str) -> uuid.UUID:
    """The id of the lock this run created; ``SessionBusyError`` while a live run holds it."""
    name = lock_name(session_id)
    started = time.monotonic()
    watched: uuid.UUID | None = None  # the lock being watched,
    seen: Heartbeat | None = None  # the beat last read while watching it,
    since = started  # and since when it is watched
    while True:
        if time.monotonic() - started >= GIVE_UP_AFTER:
            raise SessionLockError(session_id, name, GIVE_UP_AFTER)
        held = await _held(client, name)
        if held is None:
            created = await _create(client, name)
            if created is not None:
                return created
            continue
        if not held.active_slots:  # a free limit of nexusflow's earlier leases: nobody holds it
            await _delete(client, held.id)
            continue
        beat = await read_record(Heartbeat, *_where(session_id), storage=storage)
        now = time.monotonic()
        if held.id != watched:
            watched, seen, since = held.id, beat, now
        elif beat != seen:
            if beat is not None and beat.lock_id in (None, str(held.id)):
                raise SessionBusyError(session_id, beat.flow_run_id)  # it beat while we watched
            seen = beat  # another lock's beat (an earlier holder's): no sign of this one's life
        elif now - since >= STALE_AFTER:
            holder = f"flow run {seen.flow_run_id}" if seen and seen.lock_id == str(held.id) else "its holder"
            logger.warning(
                'session "%s": %s has not beaten for %.0fs (it crashed): taking the session over',
                session_id,
                holder,
                now - since,
            )
            await _delete(client, held.id)
            watched = None
            continue
        await anyio.sleep(BEAT_SECONDS / 2)


@asynccontextmanager
async def session_lease(session_id: str, flow_run_id: str) -> AsyncIterator[None]:
    """Hold the session for the body; beat while it runs; let go on every way out. The
    beat is a plain background task, not a task group: a group would wrap what the body
    raises, and Prefect must see its own suspension exception as it is. A holder that
    finds it was taken over (it stood still past ``STALE_AFTER``) is cancelled and raises
    ``SessionTakenOverError``: two runs of one session never go on side by side."""
    storage = await step_storage()
    async with get_client() as client:
        lock_id = await _acquire(client, storage, session_id)
        try:
            first = Heartbeat(session_id=session_id, flow_run_id=flow_run_id, lock_id=str(lock_id), beat=0)
            await write_record(first, *_where(session_id), storage=storage)
            with anyio.CancelScope() as stopped:
                beating = asyncio.create_task(_beat(client, storage, first, stopped))
                try:
                    yield
                finally:
                    beating.cancel()
                    with anyio.CancelScope(shield=True):
                        (still,) = await asyncio.gather(beating, return_exceptions=True)
            if stopped.cancelled_caught and isinstance(still, float):
                raise SessionTakenOverError(session_id, still)
        finally:
            with anyio.CancelScope(shield=True):
                await _delete(client, lock_id)


def _where(session_id: str) -> tuple[str, str, str]:
    return ("sessions", session_id, "lease.json")


async def _beat(
    client: PrefectClient, storage: WritableFileSystem, heartbeat: Heartbeat, stop: anyio.CancelScope
) -> float:
    """Beat until cancelled. A contender takes over only after ``STALE_AFTER`` seconds
    without a beat, so a holder that beat more recently than that cannot have lost its
    lock; after a longer gap (a frozen process, a blocked event loop, storage that failed)
    it asks the server, and if the lock is gone it cancels the run and returns the gap."""
    session = heartbeat.session_id
    name = lock_name(session)
    last = time.monotonic()  # when the last beat that was stored began
    while True:
        await anyio.sleep(BEAT_SECONDS)
        began = time.monotonic()
        if began - last > STALE_AFTER / 2:
            try:
                held = await _held(client, name)
            except Exception as exc:
                logger.warning('session "%s": could not check its lock: %s', session, exc)
            else:
                if held is None or str(held.id) != heartbeat.lock_id:
                    stop.cancel()
                    return began - last
        heartbeat = heartbeat.model_copy(update={"beat": heartbeat.beat + 1})
        try:
            await write_record(heartbeat, *_where(session), storage=storage)
        except Exception as exc:
            logger.warning('session "%s": could not beat its lease: %s', session, exc)
        else:
            last = began
