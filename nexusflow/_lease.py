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
from ._retry import api_retrying, is_transient
from ._secrets import get_logger
from ._storage import read_record, step_storage, write_record
from .errors import SessionBusyError, SessionLockError, SessionTakenOverError, describe

logger = get_logger("nexusflow.session")

BEAT_SECONDS = 1.0
STALE_AFTER = 8.0
"""Seconds without a beat after which a contender takes the session over."""
GIVE_UP_AFTER = 30.0
"""Seconds after which a contender that holds nothing and was refused by no live holder
fails with ``SessionLockError``: time for three take-overs in a row."""

LOCK_PREFIX = "nexusflow-session-"
ATTEMPTS = 5
"""Tries of each call to the server: a busy SQLite server answers 503 now and then."""


class Heartbeat(BaseModel):
    session_id: str
    flow_run_id: str
    lock_id: str | None = None
    """The lock its holder created (absent from the records of nexusflow's earlier leases)."""
    beat: int


def lock_name(session_id: str) -> str:
    return f"{LOCK_PREFIX}{digest(session_id)}"


async def _held(client: PrefectClient, name: str) -> GlobalConcurrencyLimitResponse | None:
    async for attempt in api_retrying(ATTEMPTS):
        with attempt:
            try:
                return await client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                return None
    raise AssertionError("tenacity ends with a result or the last error")


async def _create(client: PrefectClient, name: str) -> uuid.UUID | None:
    """The new lock's id, or None when another contender created it first. A read comes
    first in ``_acquire``: a create that conflicts makes the server log a traceback."""
    async for attempt in api_retrying(ATTEMPTS):
        with attempt:
            try:
                return await client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=1, active_slots=1)
                )
            except ObjectAlreadyExists:
                return None  # a retry of a create whose answer was lost lands here too: the lock
                # then looks like a stranger's and is taken over once it has not beaten
    raise AssertionError("tenacity ends with a result or the last error")


async def _delete(client: PrefectClient, lock_id: uuid.UUID) -> bool:
    """Whether this call deleted the lock (the route takes an id as well as a name)."""
    async for attempt in api_retrying(ATTEMPTS):
        with attempt:
            try:
                await client.delete_global_concurrency_limit_by_name(str(lock_id))
            except ObjectNotFound:
                return False
            return True
    raise AssertionError("tenacity ends with a result or the last error")


async def _let_go(client: PrefectClient, session_id: str, lock_id: uuid.UUID) -> None:
    """A lock that cannot be deleted is no failure of the run that finished: it stops
    beating, so the session's next run takes it over after ``STALE_AFTER`` seconds."""
    try:
        await _delete(client, lock_id)
    except Exception as exc:
        if not is_transient(exc):
            raise
        logger.warning(
            'session "%s": could not let go of its lock (%s); the next run takes it over after %.0fs',
            session_id,
            describe(exc),
            STALE_AFTER,
        )


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


class SessionLease:
    """The session as its holder holds it: ``check`` before each step stops a run that lost
    its lock while it stood still, before that step starts."""

    def __init__(self, client: PrefectClient, storage: WritableFileSystem, heartbeat: Heartbeat) -> None:
        self.client = client
        self.storage = storage
        self.heartbeat = heartbeat
        self.last = time.monotonic()
        """When the last beat that was stored began."""
        self.lost: float | None = None
        """How long the run stood still, once it is known to have lost its lock."""

    async def check(self) -> None:
        """A contender takes over only after ``STALE_AFTER`` seconds without a beat, so a
        holder that beat more recently than that cannot have lost its lock; after a longer
        gap (a frozen process, a blocked event loop, storage that failed) it asks the server."""
        if self.lost is None:
            gap = time.monotonic() - self.last
            if gap > STALE_AFTER / 2 and not await self._still_ours():
                self.lost = gap
        if self.lost is not None:
            raise SessionTakenOverError(self.heartbeat.session_id, self.lost)

    async def _still_ours(self) -> bool:
        try:
            held = await _held(self.client, lock_name(self.heartbeat.session_id))
        except Exception as exc:
            logger.warning('session "%s": could not check its lock: %s', self.heartbeat.session_id, exc)
            return True
        return held is not None and str(held.id) == self.heartbeat.lock_id

    async def beat(self, stop: anyio.CancelScope) -> None:
        """Beat until cancelled; a lost lock cancels the run (it may be inside a long step)."""
        while True:
            await anyio.sleep(BEAT_SECONDS)
            began = time.monotonic()
            try:
                await self.check()
            except SessionTakenOverError:
                stop.cancel()
                return
            beat = self.heartbeat.model_copy(update={"beat": self.heartbeat.beat + 1})
            try:
                await write_record(beat, *_where(beat.session_id), storage=self.storage)
            except Exception as exc:
                logger.warning('session "%s": could not beat its lease: %s', beat.session_id, exc)
            else:
                self.heartbeat, self.last = beat, began


@asynccontextmanager
async def session_lease(session_id: str, flow_run_id: str) -> AsyncIterator[SessionLease]:
    """Hold the session for the body; beat while it runs; let go on every way out. The
    beat is a plain background task, not a task group: a group would wrap what the body
    raises, and Prefect must see its own suspension exception as it is. A holder that lost
    its lock (it stood still past ``STALE_AFTER`` and was taken over) raises
    ``SessionTakenOverError``: two runs of one session never go on side by side."""
    storage = await step_storage()
    async with get_client() as client:
        lock_id = await _acquire(client, storage, session_id)
        try:
            first = Heartbeat(session_id=session_id, flow_run_id=flow_run_id, lock_id=str(lock_id), beat=0)
            await write_record(first, *_where(session_id), storage=storage)
            lease = SessionLease(client, storage, first)
            with anyio.CancelScope() as stopped:
                beating = asyncio.create_task(lease.beat(stopped))
                try:
                    yield lease
                finally:
                    beating.cancel()
                    with anyio.CancelScope(shield=True):
                        await asyncio.gather(beating, return_exceptions=True)
            if stopped.cancelled_caught and lease.lost is not None:
                raise SessionTakenOverError(session_id, lease.lost)
        finally:
            with anyio.CancelScope(shield=True):
                await _let_go(client, session_id, lock_id)


def _where(session_id: str) -> tuple[str, str, str]:
    return ("sessions", session_id, "lease.json")
