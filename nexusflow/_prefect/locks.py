"""Locks that exist only while held, across processes, machines and server restarts: a
session's one live run, a subscription's and a tool's slots.

A lock is a Prefect global concurrency limit that exists only while it is held. Creating it
takes it: a name is unique, so the server grants it to one contender. Deleting it by its id
lets go: an id is never reused, so a late delete can never free a newer holder's lock. The
lock lives in the server's database and nowhere else. Prefect's own concurrency leases live
in the server process's memory by default, and the embedded server runs no service that
frees an expired one, so a server restart, an upgrade, or the embedded server of another
process loses them while their slots stay taken in the database: a slot held that way was
never free again, and a session locked that way never ran again.

A holder that is SIGKILLed never deletes its lock, so it also beats a small record in result
storage. A contender that finds the lock watches that record. A new beat that names the lock
means the holder is alive. No such beat for ``STALE_AFTER`` seconds (on the contender's own
monotonic clock, so machines' clocks may disagree) means the holder is gone: the contender
deletes that lock by its id and tries again. A holder on the contender's own machine whose
process is gone is gone at once (``_liveness``). When two contenders race, one creates the
new lock and the other finds it held and beating.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

import anyio
import httpx
from prefect.client.base import PrefectHttpxAsyncClient
from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.client.schemas.responses import GlobalConcurrencyLimitResponse
from prefect.context import FlowRunContext, TaskRunContext
from prefect.filesystems import WritableFileSystem
from pydantic import BaseModel

from .._support.liveness import ProcessMark, gone, server_time, this_process
from .._support.secrets import get_logger
from ..errors import describe
from .retry import api_retrying, is_transient
from .storage import read_record, step_storage, write_record

logger = get_logger("nexusflow.locks")

BEAT_SECONDS = 1.0
STALE_AFTER = 8.0
"""Seconds without a beat after which a contender takes a lock over."""
ATTEMPTS = 5
"""Tries of each call to the server: a busy SQLite server answers 503 now and then."""
DELETE_ATTEMPTS = 12
"""Tries of a delete, from 10 ms apart (about 20 s in all): a busy SQLite server refuses a
let-go when another write commits between the delete's read and its write, a window of
milliseconds, so the first tries come soon."""


class Beat(BaseModel):
    """What a lock's holder beats; the lock it names tells its beats from an earlier holder's."""

    lock_id: str | None = None
    """The lock its holder created (absent from the records of nexusflow's earlier leases)."""
    beat: int
    at: float | None = None
    """When it beat, on the holder's clock (seconds since the epoch): shown, never compared
    with another machine's clock."""
    served_at: float | None = None
    """When it beat, on the Prefect server's clock: what a listing of sessions compares with
    the server's time, so no two machines' clocks are compared (``_liveness``)."""
    process: ProcessMark | None = None
    """The holder's process, so that a contender on its machine knows at once when it died."""
    released: bool = False
    """Its holder let go of the lock it names. The next contender then creates a lock without
    reading first; one that finds a lock held reads first, since a create that conflicts is a
    traceback in the server's log."""
    deleting: bool = False
    """Its holder let go and left the lock's delete to after its run returned (``let_go``): the
    lock may still be there, so a contender reads first, unless its own process deleted it."""


class SlotBeat(Beat):
    holder: str
    """The task run (or flow run) that holds the slot."""


async def held(client: PrefectClient, name: str) -> GlobalConcurrencyLimitResponse | None:
    return (await held_now(client, name))[0]


async def held_now(client: PrefectClient, name: str) -> tuple[GlobalConcurrencyLimitResponse | None, float | None]:
    """The lock (None when nobody holds it) and the server's time when it said so."""
    async for attempt in api_retrying(ATTEMPTS):
        with attempt:
            try:
                response = await client.request("GET", "/v2/concurrency_limits/{id_or_name}", {}, {"id_or_name": name})
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 404:
                    return None, server_time(exc.response)
                raise
            return GlobalConcurrencyLimitResponse.model_validate(response.json()), server_time(response)
    raise AssertionError("tenacity ends with a result or the last error")


@dataclass(frozen=True)
class Taken:
    """A lock this holder created: its id, and the server's time at creation, against which
    the holder's monotonic clock stamps its beats in the server's time."""

    id: uuid.UUID
    served: float
    monotonic: float

    def served_now(self) -> float:
        return self.served + time.monotonic() - self.monotonic


async def create(client: PrefectClient, name: str) -> Taken | None:
    """The new lock, or None when another contender created it first. A create that
    conflicts makes the server log a traceback: a session's lease creates first only when its
    stored beat says nobody holds it (``free_by``: the read would cost every run a round
    trip), a slot reads first."""
    body = GlobalConcurrencyLimitCreate(name=name, limit=1, active_slots=1).model_dump(mode="json", exclude_unset=True)
    async for attempt in api_retrying(ATTEMPTS):
        with attempt:
            try:
                response = await client.request("POST", "/v2/concurrency_limits/", json=body)
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 409:
                    return None  # a retry of a create whose answer was lost lands here too: the lock
                    # then looks like a stranger's and is taken over once it has not beaten
                raise
            lock = GlobalConcurrencyLimitResponse.model_validate(response.json())
            return Taken(lock.id, lock.created.timestamp() if lock.created else time.time(), time.monotonic())
    raise AssertionError("tenacity ends with a result or the last error")


async def _delete_once(client: PrefectClient, lock_id: uuid.UUID) -> httpx.Response:
    """One DELETE, past the Prefect client's own retry. The server deletes a lock by reading it
    and then writing, so a busy SQLite server answers 503 (a write committed in between) to
    most runs' let-go, and Prefect's client waits 2 s before its first retry (once even with
    retries off): that wait was most of a short run."""
    http = client._client
    request = http.build_request("DELETE", f"/v2/concurrency_limits/{lock_id}")
    if isinstance(http, PrefectHttpxAsyncClient) and http.enable_csrf_support:
        await http._add_csrf_headers(request)
    return await httpx.AsyncClient.send(http, request)


async def delete(client: PrefectClient, lock_id: uuid.UUID) -> bool:
    """Whether this call deleted the lock (the route takes an id as well as a name); a 503 is
    retried after 10 ms, then longer."""
    async for attempt in api_retrying(DELETE_ATTEMPTS, first_wait=0.01):
        with attempt:
            response = await _delete_once(client, lock_id)
            if response.status_code == 404:
                return False
            response.raise_for_status()
            return True
    raise AssertionError("tenacity ends with a result or the last error")


async def let_go(client: PrefectClient, what: str, lock_id: uuid.UUID) -> None:
    """A lock that cannot be deleted is no failure of the work that finished: it stops
    beating, so its next contender takes it over after ``STALE_AFTER`` seconds."""
    try:
        await delete(client, lock_id)
    except Exception as exc:
        if not is_transient(exc):
            raise
        logger.warning(
            "%s: could not let go of its lock (%s); the next run takes it over after %.0fs",
            what,
            describe(exc),
            STALE_AFTER,
        )


def dead(lock: uuid.UUID, beat: Beat | None) -> bool:
    """Whether the lock's holder is dead for certain: its beat names this lock, and the
    process that beat it ran on this machine and is gone."""
    return beat is not None and beat.lock_id == str(lock) and gone(beat.process)


def released(lock: uuid.UUID, beat: Beat | None) -> bool:
    """Whether the lock's holder let go of it and only its delete failed: nobody holds it."""
    return beat is not None and beat.released and beat.lock_id == str(lock)


def free_by(beat: Beat | None) -> bool:
    """Whether a lock is most likely free, from its stored beat alone: nobody ever held it, or
    its last holder let go and deleted it. A contender then creates the lock at once, without
    a read."""
    return beat is None or (beat.released and not beat.deleting)


@dataclass
class Watch:
    """A contender's view of one lock it found held, kept from one look to the next."""

    watched: uuid.UUID | None = None
    """The lock watched: a new one (another holder's) starts the watch again."""
    seen: Beat | None = None
    """The beat last read while watching it."""
    since: float = 0.0
    """When (on the contender's clock) the watched lock last showed a sign of life."""

    def verdict(self, lock: uuid.UUID, beat: Beat | None) -> Literal["alive", "stale", "watching"]:
        now = time.monotonic()
        if lock != self.watched:
            self.watched, self.seen, self.since = lock, beat, now
            return "watching"
        if beat != self.seen:
            self.seen = beat
            if beat is not None and beat.lock_id in (None, str(lock)):
                self.since = now
                return "alive"  # it beat while we watched
            return "watching"  # another lock's beat (an earlier holder's): no sign of this one's life
        return "stale" if now - self.since >= STALE_AFTER else "watching"


class Lease:
    """A lock as its holder holds it: ``lost`` tells a holder that stood still past
    ``STALE_AFTER`` (a frozen process, a blocked event loop, storage that failed) and was
    taken over."""

    def __init__(
        self,
        client: PrefectClient,
        storage: WritableFileSystem,
        name: str,
        where: tuple[str, ...],
        first: Beat,
        taken: Taken,
    ) -> None:
        self.client = client
        self.storage = storage
        self.name = name
        self.where = where
        self.taken = taken
        self.heartbeat = first.model_copy(
            update={"lock_id": str(taken.id), "served_at": taken.served_now(), "process": this_process()}
        )
        self.last = time.monotonic()
        """When the last beat that was stored began."""
        self._lost: float | None = None

    async def lost(self) -> float | None:
        """How long the holder stood still, once it is known to have lost its lock. A contender
        takes over only after ``STALE_AFTER`` seconds without a beat, so a holder that beat more
        recently than half that cannot have lost it; after a longer gap it asks the server."""
        if self._lost is None:
            gap = time.monotonic() - self.last
            if gap > STALE_AFTER / 2 and not await self._still_ours():
                self._lost = gap
        return self._lost

    async def _still_ours(self) -> bool:
        try:
            lock = await held(self.client, self.name)
        except Exception as exc:
            logger.warning("%s: could not check its lock: %s", self.name, exc)
            return True
        return lock is not None and str(lock.id) == self.heartbeat.lock_id

    async def release(self, deleting: bool = False) -> bool:
        """Say, before letting go, that the lock is let go of (and, ``deleting``, that its delete
        comes later): the next contender then never waits for this holder to go stale. Whether
        it was said: a holder that lost its lock says nothing (the beat is its successor's)."""
        if await self.lost() is not None:
            return False
        beat = self.heartbeat.model_copy(
            update={
                "beat": self.heartbeat.beat + 1,
                "at": time.time(),
                "served_at": self.taken.served_now(),
                "released": True,
                "deleting": deleting,
            }
        )
        try:
            await write_record(beat, *self.where, storage=self.storage)
        except Exception as exc:
            logger.warning("%s: could not record its let-go: %s", self.name, exc)
            return False
        return True

    async def beat_until_lost(self) -> None:
        while True:
            await anyio.sleep(BEAT_SECONDS)
            began = time.monotonic()
            if await self.lost() is not None:
                return
            beat = self.heartbeat.model_copy(
                update={"beat": self.heartbeat.beat + 1, "at": time.time(), "served_at": self.taken.served_now()}
            )
            try:
                await write_record(beat, *self.where, storage=self.storage)
            except Exception as exc:
                logger.warning("%s: could not beat its lease: %s", self.name, exc)
            else:
                self.heartbeat, self.last = beat, began


@asynccontextmanager
async def beating(lease: Lease, on_lost: Callable[[], None]) -> AsyncIterator[None]:
    """Beat while the body runs; ``on_lost`` when the lock is found lost. The beat is a plain
    background task, not a task group: a group would wrap what the body raises, and Prefect
    must see its own suspension exception as it is."""
    await write_record(lease.heartbeat, *lease.where, storage=lease.storage)

    async def beat() -> None:
        await lease.beat_until_lost()
        on_lost()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(task, return_exceptions=True)


def slot_name(base: str, index: int) -> str:
    return f"{base}-slot-{index}"


def _holder() -> str:
    task = TaskRunContext.get()
    if task is not None:
        return f"task run {task.task_run.id}"
    flow = FlowRunContext.get()
    if flow is not None and flow.flow_run is not None:
        return f"flow run {flow.flow_run.id}"
    return f"process {os.getpid()}"


@asynccontextmanager
async def slot(base: str, count: int) -> AsyncIterator[None]:
    """One of ``count`` slots named for ``base``, held for the body: the lock of the first
    free slot (``<base>-slot-<k>``), taken over from a holder that stopped beating. While
    every slot is held by a live holder it waits, and says so once."""
    holder = _holder()
    storage = await step_storage()
    async with get_client() as client:
        index, taken = await _take_slot(client, storage, base, count)
        lock_id = taken.id
        first = SlotBeat(holder=holder, beat=0, at=time.time())
        lease = Lease(client, storage, slot_name(base, index), ("limits", base, f"slot-{index}.json"), first, taken)

        def lost() -> None:
            logger.warning("%s: %s stood still and lost its slot to another holder", slot_name(base, index), holder)

        try:
            async with beating(lease, lost):
                yield
        finally:
            with anyio.CancelScope(shield=True):
                await let_go(client, slot_name(base, index), lock_id)


async def _take_slot(
    client: PrefectClient,
    storage: WritableFileSystem,
    base: str,
    count: int,
) -> tuple[int, Taken]:
    watches = [Watch() for _ in range(count)]
    waited = False
    while True:
        freed = False
        for index, watch in enumerate(watches):
            name = slot_name(base, index)
            lock = await held(client, name)
            if lock is None:
                created = await create(client, name)
                if created is not None:
                    return index, created
                continue
            beat = await read_record(SlotBeat, "limits", base, f"slot-{index}.json", storage=storage)
            if dead(lock.id, beat):
                logger.warning("%s: its holder's process on this machine is gone: freeing it", name)
                freed = await delete(client, lock.id) or freed
            elif watch.verdict(lock.id, beat) == "stale":
                logger.warning("%s: its holder has not beaten for %.0fs (it crashed): freeing it", name, STALE_AFTER)
                freed = await delete(client, lock.id) or freed
        if freed:
            continue
        if not waited:
            waited = True
            logger.info("%s: all %d slots are held; waiting for one", base, count)
        await anyio.sleep(BEAT_SECONDS)
