"""One live run per session, across processes, machines and server restarts: the session's
lock (``nexusflow._prefect.locks``), ``nexusflow-session-<digest>``. A contender that finds it held
by a holder that beats is refused (``SessionBusyError``); one that cannot take it within
``GIVE_UP_AFTER`` seconds fails with ``SessionLockError``; a holder that stood still and was
taken over stops before its next step (``SessionTakenOverError``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import anyio
from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterState,
    FlowRunFilterStateType,
    TaskRunFilter,
    TaskRunFilterState,
    TaskRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType, TaskRun
from prefect.events import emit_event
from prefect.filesystems import WritableFileSystem
from prefect.states import Crashed

from .._support.digest import digest
from .._support.secrets import get_logger
from ..errors import SessionBusyError, SessionLockError, SessionTakenOverError, describe
from . import locks as _locks
from .errors import crashed_not_beating, crashed_process_died
from .let_go import let_go_later, let_go_of
from .locks import Beat, Lease, Taken, Watch, beating, create, dead, delete, free_by, held, let_go, released
from .storage import holding, read_record, step_storage

logger = get_logger("nexusflow.session")

GIVE_UP_AFTER = 30.0
"""Seconds after which a contender that holds nothing and was refused by no live holder
fails with ``SessionLockError``: time for three take-overs in a row."""

LOCK_PREFIX = "nexusflow-session-"

MARK_WITHIN = 10.0
"""Seconds that marking a dead holder's flow run ``Crashed`` may take (a handful of requests)
before it is given up with a warning: it never holds up, nor fails, what found it dead."""
LET_GO_WAIT = 5.0
"""Seconds a session's next run waits for its own process's delete of the lock its last run
let go of, before it reads the lock and deletes it itself."""
UNFINISHED = [StateType.RUNNING, StateType.PENDING]
"""The states of a dead holder's runs that are marked ``Crashed``; a final state stays."""


class Heartbeat(Beat):
    """The session's holder, beating."""

    session_id: str
    flow_run_id: str


def lock_name(session_id: str) -> str:
    return f"{LOCK_PREFIX}{digest(session_id)}"


async def _acquire(client: PrefectClient, storage: WritableFileSystem, session_id: str) -> tuple[Taken, dict[str, str]]:
    """The lock this run created, and the runs of the dead holders it took the lock from (to
    mark ``Crashed`` once it beats: marking before would hold up its first beat, and a
    contender that waits for it would take it for dead); ``SessionBusyError`` while a live
    run holds it (a refused contender marks the runs it found dead itself)."""
    crashed: dict[str, str] = {}
    try:
        return await _take(client, storage, session_id, crashed), crashed
    except (SessionBusyError, SessionLockError):
        await mark_crashed(client, crashed)
        raise


async def _take(client: PrefectClient, storage: WritableFileSystem, session_id: str, crashed: dict[str, str]) -> Taken:
    name = lock_name(session_id)
    started = time.monotonic()
    watch = Watch()
    free = await _free_by(await read_record(Heartbeat, *_where(session_id), storage=storage))
    while True:
        if time.monotonic() - started >= GIVE_UP_AFTER:
            raise SessionLockError(session_id, name, GIVE_UP_AFTER)
        if free:
            created = await create(client, name)
            if created is not None:
                return created
        lock = await held(client, name)
        free = lock is None
        if lock is None:
            continue
        if not lock.active_slots:  # a free limit of nexusflow's earlier leases: nobody holds it
            free = await delete(client, lock.id)
            continue
        beat = await read_record(Heartbeat, *_where(session_id), storage=storage)
        if released(lock.id, beat):
            free = await delete(client, lock.id)
            continue
        if dead(lock.id, beat) and isinstance(beat, Heartbeat):
            assert beat.process is not None
            logger.warning(
                'session "%s": flow run %s died with its process %d on this machine: taking the session over',
                session_id,
                beat.flow_run_id,
                beat.process.pid,
            )
            free = await delete(client, lock.id)
            if free:
                crashed[beat.flow_run_id] = crashed_process_died(session_id, beat.process.pid, "the take-over")
            continue
        verdict = watch.verdict(lock.id, beat)
        if verdict == "alive" and beat is not None:
            raise SessionBusyError(session_id, beat.flow_run_id)
        if verdict == "stale":
            seen = watch.seen
            ours = isinstance(seen, Heartbeat) and seen.lock_id == str(lock.id)
            holder = f"flow run {seen.flow_run_id}" if isinstance(seen, Heartbeat) and ours else "its holder"
            logger.warning(
                'session "%s": %s has not beaten for %.0fs (it crashed): taking the session over',
                session_id,
                holder,
                time.monotonic() - watch.since,
            )
            free = await delete(client, lock.id)
            if free and isinstance(seen, Heartbeat) and ours:
                silent = time.monotonic() - watch.since
                crashed[seen.flow_run_id] = crashed_not_beating(session_id, silent, "the take-over")
            continue
        await anyio.sleep(_locks.BEAT_SECONDS / 2)


async def _free_by(beat: Heartbeat | None) -> bool:
    """``free_by``, and a lock this process let go of and has deleted since (a session's next
    run in the same process: no read, as when the delete was made before the run returned)."""
    if free_by(beat):
        return True
    lock = being_deleted(beat)
    return lock is not None and await let_go_of(lock, within=LET_GO_WAIT)


def being_deleted(beat: Heartbeat | None) -> uuid.UUID | None:
    """The lock a session's last beat says its holder let go of and is deleting."""
    if beat is None or not (beat.released and beat.deleting and beat.lock_id):
        return None
    return uuid.UUID(beat.lock_id)


async def mark_crashed(client: PrefectClient, dead: Mapping[str, str]) -> None:
    """Mark the flow runs of holders found dead (flow run id -> the pinned message saying
    who and how), and their task runs in flight, ``Crashed``: Prefect's open-source server
    never learns that a process died, and a run left RUNNING misleads every dashboard and
    automation. Only runs still RUNNING or PENDING (read first: a final state is never
    overridden, so a second look changes nothing), task runs before their flow run (a mark
    cut short is finished by the next look). Quiet and bounded: a failure is one warning."""
    if not any(dead):
        return
    try:
        with anyio.fail_after(MARK_WITHIN):
            await _mark_crashed(client, [uuid.UUID(run) for run in dead if run], dead)
    except Exception as exc:
        logger.warning("could not mark flow run %s Crashed: %s", ", ".join(dead), describe(exc))


STEP_CRASHED = "nexusflow.step.crashed"
"""Emitted for each step (task run) marked ``Crashed``: Prefect's server emits an event when
a flow run's state is set through its API, never a task run's (task runs' events come from
the engine that ran them, here dead). Without it an automation that waits for a step's next
event (the "stalled" alert) would take the crashed step for one that made no progress."""


async def _mark_crashed(client: PrefectClient, ids: list[uuid.UUID], dead: Mapping[str, str]) -> None:
    unfinished = await client.read_flow_runs(
        flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=ids), state=FlowRunFilterState(type=FlowRunFilterStateType(any_=UNFINISHED))
        )
    )
    if not unfinished:
        return
    in_flight = await client.read_task_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id for run in unfinished])),
        task_run_filter=TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=UNFINISHED))),
    )
    runs = {run.id: run for run in unfinished}
    flows: dict[uuid.UUID, str] = {}
    for task_run in in_flight:
        run = runs.get(task_run.flow_run_id) if task_run.flow_run_id is not None else None
        if run is not None:
            message = dead[str(run.id)]
            await client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
            if run.flow_id not in flows:
                flows[run.flow_id] = (await client.read_flow(run.flow_id)).name
            _step_crashed(task_run, run, flows[run.flow_id], message)
    for run in unfinished:
        await client.set_flow_run_state(run.id, Crashed(message=dead[str(run.id)]), force=True)


def _step_crashed(task_run: TaskRun, run: FlowRun, flow_name: str, message: str) -> None:
    """``STEP_CRASHED`` about the task run, related to its flow run and flow as Prefect's own
    task-run events are (what an automation matches them by)."""
    emit_event(
        STEP_CRASHED,
        resource={"prefect.resource.id": f"prefect.task-run.{task_run.id}", "prefect.resource.name": task_run.name},
        related=[
            {
                "prefect.resource.id": f"prefect.flow-run.{run.id}",
                "prefect.resource.role": "flow-run",
                "prefect.resource.name": run.name,
            },
            {
                "prefect.resource.id": f"prefect.flow.{run.flow_id}",
                "prefect.resource.role": "flow",
                "prefect.resource.name": flow_name,
            },
        ],
        payload={"message": message},
    )


class SessionLease:
    """The session as its holder holds it: ``check`` before each step stops a run that lost
    its lock while it stood still, before that step starts."""

    def __init__(self, session_id: str, lease: Lease) -> None:
        self.session_id = session_id
        self.lease = lease

    async def check(self) -> None:
        lost = await self.lease.lost()
        if lost is not None:
            raise SessionTakenOverError(self.session_id, lost)


@asynccontextmanager
async def session_lease(session_id: str, flow_run_id: str) -> AsyncIterator[SessionLease]:
    """Hold the session for the body; beat while it runs; let go on every way out. A holder
    that lost its lock raises ``SessionTakenOverError``: two runs of one session never go on
    side by side (a lost lock cancels the body, which may be inside a long step)."""
    storage = await step_storage()
    async with get_client() as client:
        taken, crashed = await _acquire(client, storage, session_id)
        lock_id = taken.id
        lease: Lease | None = None
        try:
            first = Heartbeat(session_id=session_id, flow_run_id=flow_run_id, beat=0, at=time.time())
            lease = Lease(client, storage, lock_name(session_id), _where(session_id), first, taken)
            with holding(session_id), anyio.CancelScope() as stopped:
                async with beating(lease, stopped.cancel):
                    await mark_crashed(client, crashed)  # no request unless it took over
                    yield SessionLease(session_id, lease)
            lost = await lease.lost() if stopped.cancelled_caught else None
            if lost is not None:
                raise SessionTakenOverError(session_id, lost)
        finally:
            with anyio.CancelScope(shield=True):
                said = False
                if lease is not None:
                    with holding(session_id):
                        said = await lease.release(deleting=True)
                if said:  # its contenders know it is free: the delete need not hold up the run's end
                    let_go_later(lock_id, f'session "{session_id}"')
                else:
                    await let_go(client, f'session "{session_id}"', lock_id)


async def last_beat(session_id: str) -> Heartbeat | None:
    """The session's last stored beat (its holder's, or an earlier holder's), or None."""
    return await read_record(Heartbeat, *_where(session_id), storage=await step_storage())


async def still_held(beat: Heartbeat) -> bool:
    """Whether the lock that ``beat`` names still holds its session: a run that ended let go
    of it (its beat says so, whether or not the lock's delete was made yet); one whose process
    died did not, until a contender takes it over."""
    if beat.released:
        return False
    async with get_client() as client:
        lock = await held(client, lock_name(beat.session_id))
    return lock is not None and str(lock.id) == beat.lock_id


def _where(session_id: str) -> tuple[str, str, str]:
    return ("sessions", session_id, "lease.json")
