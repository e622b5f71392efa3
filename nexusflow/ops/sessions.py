"""Sessions over their life, as an operator meets them: listed with where they stand,
forgotten one by one, pruned by age and state.

A session's records all live under one prefix of the result storage,
``nexusflow/sessions/<id>/``: its steps, its inputs, what it waits for, the command's
invocation, its lease's beat and its status. A conversation's record lives under
``nexusflow/conversations/``. The status says how its last run ended (``running`` until it
does); a run that crashed leaves ``running`` behind, and its lease, which no longer beats,
tells it apart within seconds.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args
from uuid import UUID

import anyio
from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterName,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.exceptions import ObjectNotFound
from prefect.filesystems import WritableFileSystem
from prefect.utilities.asyncutils import run_coro_as_sync
from pydantic import BaseModel

from .._prefect.answer_claims import forget_claims
from .._prefect.artifact_keys import keys_of
from .._prefect.errors import crashed_not_beating, crashed_process_died
from .._prefect.let_go import let_go_of
from .._prefect.locks import STALE_AFTER, dead, delete, held, held_now, released
from .._prefect.retry import api_retrying
from .._prefect.server import use_server
from .._prefect.session_lock import LET_GO_WAIT, Heartbeat, lock_name, mark_crashed
from .._prefect.storage import ROOT, read_record, session_prefix, step_storage, steps_prefix
from .._prefect.storage_tree import children, delete_record, delete_tree, files
from ..config._checks import check_session_id
from ..config.errors import argument_wrong
from ..errors import SessionLiveError
from ..state.store import ancestors, conversation_key, nested_sessions, read_status, unlink
from .background_logs import delete_logs
from .errors import sessions_bad_duration, sessions_bad_state, sessions_duration_too_long

State = Literal["running", "waiting", "completed", "failed", "crashed", "cancelled"]
STATES: tuple[State, ...] = get_args(State)
PRUNED: tuple[State, ...] = ("completed", "failed", "crashed", "cancelled")
"""What ``prune`` removes unless told which states: never a run, never a waiting request."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_LONGEST = timedelta(days=36500)
"""The longest duration taken: a century; much longer and the cutoff falls before the year 1."""
_AT_ONCE = 16
"""Sessions read at once from storage."""
_FORGET_AT_ONCE = 8
"""Sessions forgotten at once by ``prune``: a handful of Prefect API calls each, on a server
that answers too many at once with 503s (SQLite)."""
_PAGE = 200
"""Flow runs read at once (the server's default page)."""


class SessionInfo(BaseModel):
    """One session as ``nexusflow sessions`` shows it."""

    session_id: str
    state: State
    flow_run_id: str | None
    updated: datetime
    """Its last activity: its last run's end, or its running run's last heartbeat."""
    turns: int
    tool_calls: int
    waits_for: str | None = None
    """What a waiting session asks (its request's prompt), or, for a deployment's run that
    waits for its quota's reset, that reset."""
    tool: str | None = None
    """The tool whose call waits for the answer."""
    error: str | None = None
    cost_usd: float | None = None
    """What its turns cost, as reported; None where nothing stated a cost."""
    tokens: int | None = None
    last_step: str | None = None
    """For a running or crashed session, its last stored step, as its task runs are named:
    ``turn-N`` (the model's turn N), ``tool-N`` (the tool calls of turn N); None before any."""


class Forgotten(BaseModel):
    """What ``forget`` removed of one session."""

    session_id: str
    records: int
    """Records deleted from the result storage (steps, inputs, state, invocation, status)."""
    conversation: bool
    lock: bool
    """Whether a crashed holder's session lock was left on the Prefect server and deleted."""
    artifacts: int = 0
    """Its artifacts deleted from the Prefect server (each run's transcript, summary and
    progress); its flow runs, their task runs and logs stay: Prefect's history."""
    logs: int = 0
    """The output files of its runs ``nexusflow mcp`` started in the background, on this machine."""


def duration(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w``, ``0s``."""
    match = _DURATION.match(text)
    if match is None:
        raise sessions_bad_duration(text)
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if seconds > _LONGEST.total_seconds():
        raise sessions_duration_too_long(text, f"{_LONGEST.days}d (a century)")
    return timedelta(seconds=seconds)


def states(given: Iterable[str]) -> set[State]:
    chosen: set[State] = set()
    for name in given:
        for part in name.split(","):
            part = part.strip()
            if part not in STATES:
                raise sessions_bad_state(part, STATES)
            chosen.add(part)
    return chosen


async def _alive(
    client: PrefectClient, session_id: str, beat: Heartbeat | None, found_by: str = "nexusflow sessions"
) -> tuple[bool, str | None]:
    """Whether a run holds the session and lives, judged on the Prefect server's clock (the
    holder stamps its beats with it) or, on this machine, by its process: never by comparing
    this machine's clock with the holder's (``_liveness``). A lock nobody holds means no run.
    With it, for a holder proven dead (its process gone, or its own beats stale), the pinned
    message its flow run is marked ``Crashed`` with; a lock gone proves nothing of the kind
    (its run may have just ended)."""
    lock, now = await held_now(client, lock_name(session_id))
    if lock is None:
        return False, None
    if released(lock.id, beat):  # its holder let go; only the delete failed
        return False, None
    if dead(lock.id, beat):
        assert beat is not None and beat.process is not None
        return False, crashed_process_died(session_id, beat.process.pid, found_by)
    if beat is None or beat.lock_id != str(lock.id):  # its holder took it and has not beaten yet
        taken = lock.created.timestamp() if lock.created is not None else None
        return now is None or taken is None or now - taken < STALE_AFTER + _DATE_RESOLUTION, None
    if beat.served_at is not None and now is not None:
        silent = now - beat.served_at
        if silent < STALE_AFTER + _DATE_RESOLUTION:
            return True, None
        return False, crashed_not_beating(session_id, silent, found_by)
    return beat.at is not None and time.time() - beat.at < STALE_AFTER, None  # a beat of an earlier nexusflow


_DATE_RESOLUTION = 1.0
"""The server's ``Date`` is to the second: a beat is taken for alive for a second longer."""


def job_session(flow_run_id: str) -> str:
    """The session of an ``agent_job`` run not given one: its own, named for its flow run."""
    return f"job-{flow_run_id}"


async def _crash_if_dead(client: PrefectClient, session_id: str, beat: Heartbeat | None, found_by: str) -> bool:
    """Whether the session's holder lives; one proven dead has its flow run marked Crashed."""
    alive, died = await _alive(client, session_id, beat, found_by)
    if died is not None and beat is not None:
        await mark_crashed(client, {beat.flow_run_id: died})
    return alive


WATCHED = ("agent_run", "agent-job")
"""The flows whose RUNNING runs the watch checks: a run of either names its session."""

WATCH_EVERY = 5.0
"""Seconds between two looks of ``nexusflow server``'s watch: a run whose process died reads
``Crashed`` within this plus the heartbeat window (``STALE_AFTER``) and a second, at once
when its process ran on this machine."""


async def crash_dead_runs(found_by: str = "nexusflow server's watch") -> list[str]:
    """Mark ``Crashed`` the RUNNING runs of ``agent_run`` and ``agent-job`` whose holder is
    dead (what ``nexusflow sessions`` does while it lists, without reading every session):
    nobody has to list sessions for a killed run's state to turn honest. The sessions found
    dead, in the order found."""
    use_server()
    found: list[str] = []
    async with get_client() as client:
        for session_id in await _running_sessions(client):
            beat = await read_record(Heartbeat, "sessions", session_id, "lease.json")
            _, died = await _alive(client, session_id, beat, found_by)
            if died is not None and beat is not None:
                await mark_crashed(client, {beat.flow_run_id: died})
                found.append(session_id)
    return found


async def _running_sessions(client: PrefectClient) -> list[str]:
    sessions: list[str] = []
    for name in WATCHED:
        offset = 0
        while page := await client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[name])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))
            ),
            offset=offset,
            limit=_PAGE,
        ):
            for run in page:
                given = run.parameters.get("session_id")
                sessions.append(given if isinstance(given, str) else job_session(str(run.id)))
            offset += len(page)
    return list(dict.fromkeys(sessions))


async def _stored(session_id: str) -> tuple[int, int, str | None]:
    """The turns and tool calls a session's steps hold, and its last stored step: what a run
    that crashed before its status said so had done (its status still reads 0 from its start).
    A position counts once, whatever records a changed prompt left beside it."""
    storage = await step_storage()
    turns = calls = 0
    last: tuple[int, str] | None = None
    for step in await children(storage, steps_prefix(session_id)):
        kinds = await children(storage, f"{steps_prefix(session_id)}/{step}")
        turns += "turn" in kinds
        made = 0
        if "tool" in kinds:
            names = await files(storage, f"{steps_prefix(session_id)}/{step}/tool")
            made = len({name.partition("-")[0] for name in names})
            calls += made
        if step.isdigit() and ("turn" in kinds or made):
            last = max(last or (-1, ""), (int(step), f"tool-{step}" if made else f"turn-{step}"))
    return turns, calls, last[1] if last is not None else None


async def _info(session_id: str, client: PrefectClient) -> SessionInfo | None:
    status = await read_status(session_id)
    beat = await read_record(Heartbeat, "sessions", session_id, "lease.json")
    if status is None and beat is None:
        return None  # a session of an earlier nexusflow, or records without a run
    if status is None or status.state == "running":
        alive = await _crash_if_dead(client, session_id, beat, "nexusflow sessions")
        stamp = beat.served_at or beat.at if beat is not None else None
        last = datetime.fromtimestamp(stamp, UTC) if stamp else None
        turns, calls, last_step = await _stored(session_id)
        return SessionInfo(
            session_id=session_id,
            state="running" if alive else "crashed",
            flow_run_id=beat.flow_run_id if beat is not None else status.flow_run_id if status else None,
            updated=last or (status.updated if status else datetime.now(UTC)),
            turns=max(turns, status.turns if status else 0),
            tool_calls=max(calls, status.tool_calls if status else 0),
            last_step=last_step,
        )
    request = status.request
    return SessionInfo(
        session_id=session_id,
        state=status.state,
        flow_run_id=status.flow_run_id or None,
        updated=status.updated,
        turns=status.turns,
        tool_calls=status.tool_calls,
        waits_for=request.prompt if request is not None else status.waits_for,
        tool=request.tool if request is not None else None,
        cost_usd=status.cost_usd,
        tokens=status.tokens,
        error=status.error,
    )


async def session_info(session_id: str) -> SessionInfo | None:
    """One session as ``list_sessions`` shows it; None when the result storage holds no run of it."""
    check_session_id(session_id, "session_info")
    use_server()
    async with get_client() as client:
        return await _info(session_id, client)


async def list_sessions(*, state: Iterable[str] = (), older_than: timedelta | None = None) -> list[SessionInfo]:
    """Every session in the result storage, the most recently active first; ``state`` keeps
    only those states, ``older_than`` only sessions idle for longer."""
    wanted = states(state) or set(STATES)
    if older_than is not None and not isinstance(older_than, timedelta):
        raise argument_wrong("list_sessions", "older_than", "a timedelta or None", older_than)
    use_server()
    storage = await step_storage()
    names = await children(storage, f"{ROOT}/sessions")
    found: dict[str, SessionInfo] = {}
    limiter = anyio.CapacityLimiter(_AT_ONCE)

    async def one(name: str, client: PrefectClient) -> None:
        async with limiter:
            info = await _info(name, client)
        if info is not None:
            found[name] = info

    async with get_client() as client, anyio.create_task_group() as group:
        for name in names:
            group.start_soon(one, name, client)
    cutoff = datetime.now(UTC) - older_than if older_than is not None else None
    kept = [info for info in found.values() if info.state in wanted and (cutoff is None or info.updated <= cutoff)]
    return sorted(kept, key=lambda info: info.updated, reverse=True)


async def forget_session(session_id: str) -> list[Forgotten]:
    """Delete a session and the sessions nested in it (its sub-agents, its fan-out members,
    a conversation's exchanges, each linked to it as it started; never another session whose
    id merely begins the same): their records, a conversation kept under the id, their
    artifacts on the Prefect server, and a crashed holder's lock left there. A session that
    runs is refused (``SessionLiveError``), and then nothing is deleted."""
    check_session_id(session_id, "forget_session")
    use_server()
    storage = await step_storage()
    return await _forget(storage, session_id, set(await children(storage, f"{ROOT}/sessions")))


async def tree(session_id: str) -> list[str]:
    """The session and every session nested in it, by their links, the session first."""
    found = [session_id]
    for name in found:  # grows as it goes: each session's nested ones join the walk
        found += [nested for nested in await nested_sessions(name) if nested not in found]
    return found


async def _forget(storage: WritableFileSystem, session_id: str, known: set[str]) -> list[Forgotten]:
    """``forget_session`` among the sessions ``known`` to the storage."""
    names = [name for name in await tree(session_id) if name in known]
    async with get_client() as client:
        infos = [info for info in [await _info(name, client) for name in names] if info is not None]
        for info in infos:
            if info.state == "running":
                raise SessionLiveError(info.session_id, info.flow_run_id)
        if session_id in known:
            await unlink(session_id)
        forgotten = []
        for name in sorted(set(names) | {session_id}):
            # The records last: they are how a prune finds the session, so a forget that failed
            # midway (the API down) is finished by the next prune or forget.
            artifacts = await _delete_artifacts(client, name)
            await forget_claims(client, name)
            lock = await held(client, lock_name(name))
            if lock is not None and await let_go_of(lock.id, within=LET_GO_WAIT):
                lock = None  # its run, in this process, let go and deleted it meanwhile: no left-over
            if lock is not None:
                await delete(client, lock.id)
            records = await delete_tree(storage, session_prefix(name))
            conversation = await delete_record(storage, conversation_key(name)) if name == session_id else 0
            logs = await delete_logs(name)
            if records or conversation or lock is not None or artifacts or logs:
                forgotten.append(
                    Forgotten(
                        session_id=name,
                        records=records,
                        conversation=bool(conversation),
                        lock=lock is not None,
                        artifacts=artifacts,
                        logs=logs,
                    )
                )
    return forgotten


async def _delete_artifacts(client: PrefectClient, name: str) -> int:
    """The session's artifacts, every version of each key, on its own flow runs
    (``agent-<id>``): another session whose id maps to the same key keeps its own."""
    keys = ArtifactFilter(key=ArtifactFilterKey(any_=keys_of(name)))
    runs = FlowRunFilter(name=FlowRunFilterName(any_=[f"agent-{name}"]))
    deleted = 0
    while found := await client.read_artifacts(artifact_filter=keys, flow_run_filter=runs, limit=200):
        for artifact in found:  # one at a time: prune's forgets beside this one delete theirs too
            await _delete_artifact(client, artifact.id)
        deleted += len(found)
    return deleted


async def _delete_artifact(client: PrefectClient, artifact: UUID) -> None:
    """A delete the server refused for being busy (SQLite's 503, once Prefect's own retries
    are spent: seen in a prune of 300 sessions on a loaded machine) is tried again."""
    async for attempt in api_retrying(first_wait=0.5):
        with attempt, contextlib.suppress(ObjectNotFound):  # deleted by a forget beside this one
            await client.delete_artifact(artifact)


async def prune_sessions(*, older_than: timedelta, state: Iterable[str] = ()) -> list[Forgotten]:
    """Forget every session idle for longer than ``older_than`` in one of ``state`` (by
    default completed, failed and crashed: a waiting request stays until it is answered or
    named). A running session is never pruned. Sessions nested in none of the others are
    forgotten ``_FORGET_AT_ONCE`` at a time (their trees are apart), then, one by one, the
    nested ones whose outer session was refused because a session in it runs."""
    wanted = states(state) or set(PRUNED)
    wanted.discard("running")
    idle = [info.session_id for info in await list_sessions(state=sorted(wanted), older_than=older_than)]
    storage = await step_storage()
    known = set(await children(storage, f"{ROOT}/sessions"))
    chosen = set(idle)
    outer = [name for name in idle if not await _outer_names(name, chosen)]
    done: dict[str, list[Forgotten]] = {}
    limiter = anyio.CapacityLimiter(_FORGET_AT_ONCE)

    async def one(session_id: str) -> None:
        async with limiter:
            try:
                done[session_id] = await _forget(storage, session_id, known)
            except SessionLiveError:
                pass  # a session nested in it runs: it stays, whole, for the next prune

    async with anyio.create_task_group() as group:
        for name in outer:
            group.start_soon(one, name)
    for forgotten in done.values():
        known -= {one.session_id for one in forgotten}
    for name in idle:
        if name not in done and name in known and name not in outer:
            await one(name)
            known -= {one.session_id for one in done.get(name, [])}
    return [one for name in idle for one in done.get(name, [])]


async def _outer_names(name: str, among: set[str]) -> list[str]:
    """The sessions among ``among`` that ``name`` is nested in, up its links."""
    return [outer for outer in await ancestors(name) if outer in among]


def list_sessions_sync(*, state: Iterable[str] = (), older_than: timedelta | None = None) -> list[SessionInfo]:
    """``list_sessions`` for synchronous code."""
    return run_coro_as_sync(list_sessions(state=state, older_than=older_than))


def forget_session_sync(session_id: str) -> list[Forgotten]:
    """``forget_session`` for synchronous code."""
    return run_coro_as_sync(forget_session(session_id))


def prune_sessions_sync(*, older_than: timedelta, state: Iterable[str] = ()) -> list[Forgotten]:
    """``prune_sessions`` for synchronous code."""
    return run_coro_as_sync(prune_sessions(older_than=older_than, state=state))
