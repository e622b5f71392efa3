"""The session lock (``nexusflow._prefect.session_lock``) against a real server: nothing of it outlives a
run, a lock left by nexusflow's earlier leases is taken over, a take-over that cannot
succeed ends with its pinned error, and a holder that lost its lock stops. Crashes and
races across processes and servers are in ``test_server_places.py``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings
from pydantic import BaseModel

import nexusflow._prefect.locks as locks
import nexusflow._prefect.session_lock as lease
from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool
from nexusflow._prefect.let_go import drain
from nexusflow._prefect.storage import holding, step_storage, write_record
from nexusflow._support.liveness import ProcessMark, this_process
from nexusflow.ops.sessions import forget_session

from helpers.flaky_api import flaky_api

pytestmark = [pytest.mark.anyio]

DELETE_LOCK = r"DELETE /api/v2/concurrency_limits/[^/]+"


async def lock_of(session_id: str) -> uuid.UUID | None:
    """The session's lock, once this process's let-goes are done (``let_go``)."""
    assert await anyio.to_thread.run_sync(drain) == []
    async with get_client() as client:
        try:
            return (await client.read_global_concurrency_limit_by_name(lease.lock_name(session_id))).id
        except ObjectNotFound:
            return None


async def make_lock(session_id: str, active_slots: int = 1) -> uuid.UUID:
    async with get_client() as client:
        return await client.create_global_concurrency_limit(
            GlobalConcurrencyLimitCreate(name=lease.lock_name(session_id), limit=1, active_slots=active_slots)
        )


def answer(request: ModelRequest) -> str:
    return "done"


def ended_pid() -> int:
    """The pid of a process of this machine that has ended: its holder is gone for certain."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(ended.stdout)


async def held_by(session_id: str, process: ProcessMark | None) -> uuid.UUID:
    """The session's lock, held by a holder that beat once, as ``process``, and beats no more."""
    lock = await make_lock(session_id)
    beat = lease.Heartbeat(
        session_id=session_id, flow_run_id=str(uuid.uuid4()), beat=3, at=time.time(), lock_id=str(lock), process=process
    )
    with holding(session_id):  # as the holder wrote it
        await write_record(beat, "sessions", session_id, "lease.json", storage=await step_storage())
    return lock


async def test_a_finished_run_and_a_pending_run_leave_no_lock(session_id):
    from nexusflow import suspend

    @tool
    def ask() -> str:
        """Ask a person."""
        return suspend("May I?")

    def model(request: ModelRequest):
        return {"tool_calls": [{"name": "ask", "arguments": {}}]}

    done = await create_in_process_client(answer).run("go", session_id=session_id)
    assert done.status == "completed" and await lock_of(session_id) is None
    async with await Toolkit.load(tools=[ask]) as toolkit:
        waiting = await create_in_process_client(model).run("go", toolkit, session_id=f"{session_id}-p")
    assert waiting.status == "pending" and await lock_of(f"{session_id}-p") is None


async def test_a_free_limit_left_by_earlier_leases_is_taken_at_once(session_id):
    """nexusflow 0.1 left a one-slot limit of the same name per session, its slot free."""
    await make_lock(session_id, active_slots=0)
    started = time.monotonic()
    result = await create_in_process_client(answer).run("go", session_id=session_id)
    assert result.status == "completed", result.error
    assert time.monotonic() - started < locks.STALE_AFTER
    assert await lock_of(session_id) is None


@pytest.mark.slow
async def test_an_orphaned_slot_of_earlier_leases_is_taken_over_once_its_beat_is_stale(session_id, monkeypatch):
    """Its slot taken for ever (the lease was lost with the server's memory), its beat record
    in the old form, without a lock id."""
    monkeypatch.setattr(locks, "STALE_AFTER", 1.0)

    class OldHeartbeat(BaseModel):
        session_id: str
        flow_run_id: str
        lease_id: str
        beat: int

    await make_lock(session_id, active_slots=1)
    old = OldHeartbeat(session_id=session_id, flow_run_id=str(uuid.uuid4()), lease_id=str(uuid.uuid4()), beat=7)
    with holding(session_id):  # the records an earlier holder left
        await write_record(old, "sessions", session_id, "lease.json")
    result = await create_in_process_client(answer).run("go", session_id=session_id)
    assert result.status == "completed", result.error
    assert await lock_of(session_id) is None


@pytest.mark.slow
async def test_a_lock_that_keeps_coming_back_unbeaten_ends_the_take_over_with_the_pinned_error(session_id, monkeypatch):
    """Each time the lock is deleted, something creates it again first and never beats (a
    contender that crashes over and over, winning every race): the take-over gives up
    within its bound, never loops. The race is won by wrapping the delete, the one way to
    win it every time."""
    monkeypatch.setattr(locks, "STALE_AFTER", 0.5)
    monkeypatch.setattr(lease, "GIVE_UP_AFTER", 3.0)
    name = lease.lock_name(session_id)
    deleted = locks.delete

    async def delete_then_someone_recreates(client, lock_id):
        gone = await deleted(client, lock_id)
        await make_lock(session_id)
        return gone

    monkeypatch.setattr(lease, "delete", delete_then_someone_recreates)
    await make_lock(session_id)
    started = time.monotonic()
    result = await create_in_process_client(answer).run("go", session_id=session_id)
    monkeypatch.undo()
    assert result.status == "failed"
    assert result.error == (
        f'session: "{session_id}" could not be taken over within 3s: its lock (the Prefect concurrency limit'
        f" {name}) stays held by a run that does not beat; if no run of this session is alive, delete the lock"
        f" (prefect gcl delete {name}) and run it again"
    )
    assert time.monotonic() - started < 30
    async with get_client() as client:
        await client.delete_global_concurrency_limit_by_name(name)


@pytest.mark.slow
async def test_a_holder_that_stood_still_and_lost_its_lock_stops_before_its_next_turn(session_id, monkeypatch):
    """The tool blocks the event loop (no beat) while another run deletes the lock and takes
    the session: when it wakes, the run stops, the new holder's lock stays, and the model
    is not asked again."""
    monkeypatch.setattr(locks, "STALE_AFTER", 1.0)
    asked: list[int] = []
    taken: list[uuid.UUID] = []

    @tool
    async def stall() -> str:
        """Stand still."""
        with get_client(sync_client=True) as client:
            mine = client.read_global_concurrency_limit_by_name(lease.lock_name(session_id)).id
            client.delete_global_concurrency_limit_by_name(str(mine))
            taken.append(
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=lease.lock_name(session_id), limit=1, active_slots=1)
                )
            )
        time.sleep(2)  # blocks the loop: no beat
        return "stood still"

    def model(request: ModelRequest):
        asked.append(len(request.messages))
        return {"tool_calls": [{"name": "stall", "arguments": {}}]} if len(asked) == 1 else "went on"

    async with await Toolkit.load(tools=[stall]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith(f'session: "{session_id}" was taken over by another run while this one stood still')
    assert len(asked) == 1, "the run stopped before its next turn"
    assert await lock_of(session_id) == taken[0], "the new holder's lock is left alone"
    async with get_client() as client:
        await client.delete_global_concurrency_limit_by_name(str(taken[0]))


@pytest.mark.slow  # several runs through the server: the fast tier stays under 90 s
@pytest.mark.usefixtures("own_events_worker")
async def test_a_lock_delete_refused_with_503_is_retried_by_nexusflow_not_by_prefects_client(session_id, caplog):
    """What a busy SQLite server answers to most let-goes. Prefect's client would wait 2 s
    before its first retry (even with its retries off); nexusflow's own retry waits 10 ms."""
    caplog.set_level(logging.DEBUG, logger="prefect.client")
    busy: list[str] = []  # the session server's own 503s (a busy SQLite in CI), relayed as they are
    with flaky_api(os.environ["PREFECT_API_URL"], failures=2, route=DELETE_LOCK, relayed=busy) as (url, refused):
        with temporary_settings({PREFECT_API_URL: url}):
            result = await create_in_process_client(answer).run("go", session_id=session_id)
            assert await anyio.to_thread.run_sync(drain) == []
    assert len(refused) == 2
    assert result.status == "completed", result.error
    assert await lock_of(session_id) is None
    retried = caplog.text.count("retryable status code 503")
    assert retried == len(busy), f"Prefect's client retried {retried} 503s, the server's own were {busy}"


@pytest.mark.usefixtures("own_events_worker")
async def test_the_end_of_a_run_never_waits_for_its_locks_delete(session_id):
    """A server that refuses the lock's delete (SQLite's 503 while it records the run's steps:
    0.1 s of a one-turn run's end, up to 5.7 s of a forty-turn run's on 2af404c) holds up
    nothing: the run returns with its let-go stored and its lock still there, and the delete
    lands once the server takes it."""
    taking = threading.Event()
    with flaky_api(os.environ["PREFECT_API_URL"], failures=10**6, route=DELETE_LOCK, until=taking) as (url, _refused):
        with temporary_settings({PREFECT_API_URL: url}):
            result = await create_in_process_client(answer).run("go", session_id=session_id)
            beat = await lease.last_beat(session_id)
            async with get_client() as client:
                lock = await locks.held(client, lease.lock_name(session_id))
            taking.set()
            assert await anyio.to_thread.run_sync(drain) == []
    assert result.status == "completed", result.error
    assert beat is not None and beat.released and beat.deleting, beat
    assert lock is not None and str(lock.id) == beat.lock_id, "the run returned before its lock's delete"
    assert await lock_of(session_id) is None


async def test_forget_right_after_a_run_finds_no_lock_left_over(session_id):
    """The lock's delete, left to after the run returned (a second later), is not a crashed
    run's left-over: ``forget`` says so only of a lock whose run did not let go of it."""
    result = await create_in_process_client(answer).run("go", session_id=session_id)
    (forgotten,) = await forget_session(session_id)
    assert result.status == "completed", result.error
    assert forgotten.session_id == session_id and not forgotten.lock, forgotten
    assert await lock_of(session_id) is None


LET_GO = """\
import sys
from nexusflow import create_in_process_client
result = create_in_process_client(lambda request: "done").run_sync("go", session_id=sys.argv[1])
print(result.status, flush=True)
"""


def _program(session_id: str, url: str) -> subprocess.Popen[str]:
    """A program that makes one run of the session against ``url`` and exits."""
    env = {**os.environ, "PREFECT_API_URL": url}
    return subprocess.Popen(
        [sys.executable, "-c", LET_GO, session_id], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow  # a Python program of its own
async def test_a_program_that_exits_after_its_run_deletes_its_lock_first(session_id):
    """The delete left to after the run returned is made before the process exits, even
    while the server refuses it for seconds (eight 503s: about 2.5 s of retries)."""
    with flaky_api(os.environ["PREFECT_API_URL"], failures=8, route=DELETE_LOCK) as (url, refused):
        program = _program(session_id, url)
        out, err = await anyio.to_thread.run_sync(program.communicate)
    assert program.returncode == 0 and out == "completed\n", err[-3000:]
    assert len(refused) == 8
    assert await lock_of(session_id) is None, "the program let go of its lock before it exited"
    assert "could not let go" not in err, err[-3000:]


@pytest.mark.slow  # a Python program of its own
async def test_a_lock_left_by_a_program_killed_after_its_run_is_taken_at_once(session_id, monkeypatch):
    """A program SIGKILLed after its run returned, its lock's delete still refused: the
    session's next run (in another process) reads its let-go and deletes the lock itself at
    once, without a conflict in the server's log; a wait for the lock to go stale would end in
    ``SessionLockError`` (a heartbeat window of ten minutes)."""
    monkeypatch.setattr(locks, "STALE_AFTER", 600.0)
    with flaky_api(os.environ["PREFECT_API_URL"], failures=10**6, route=DELETE_LOCK) as (url, _refused):
        program = _program(session_id, url)
        assert program.stdout is not None
        line = await anyio.to_thread.run_sync(program.stdout.readline)
        program.kill()  # waiting at exit for the delete the server refuses
        _, err = program.communicate()
    assert line == "completed\n", err[-3000:]
    left = await lease.last_beat(session_id)
    assert left is not None and left.released and left.deleting
    async with get_client() as client:
        assert str((await locks.held(client, lease.lock_name(session_id))).id) == left.lock_id
    log = Path(os.environ["PREFECT_HOME"]) / "server.log"
    before = log.stat().st_size
    result = await create_in_process_client(answer).run("again", session_id=session_id)
    assert result.status == "completed", result.error
    assert await lock_of(session_id) is None
    with log.open("rb") as file:
        file.seek(before)
        written = file.read().decode(errors="replace")
    assert "IntegrityError" not in written and "Encountered exception" not in written, written[-3000:]


async def test_a_take_over_and_the_runs_after_it_never_make_the_server_log_a_conflict(session_id):
    """The session's lock is held by a run whose process died on this machine. The next run
    reads the lock before creating one, since the dead holder's beat was never released. On
    d56091b it created first, and the server logged the conflict as an unhandled
    ``IntegrityError``. The runs after it find the beat their predecessor released and create
    the lock at once."""
    await held_by(session_id, this_process().model_copy(update={"pid": ended_pid()}))
    log = Path(os.environ["PREFECT_HOME"]) / "server.log"  # the session's server's
    before = log.stat().st_size
    for prompt in ("go", "go", "again"):
        result = await create_in_process_client(answer).run(prompt, session_id=session_id)
        assert result.status == "completed", result.error
    with log.open("rb") as file:
        file.seek(before)
        written = file.read().decode(errors="replace")
    assert "IntegrityError" not in written and "Encountered exception" not in written, written[-3000:]


@pytest.mark.slow
@pytest.mark.usefixtures("own_events_worker")
async def test_a_lock_that_cannot_be_deleted_is_taken_over_by_the_next_run(session_id, monkeypatch, caplog):
    """The run that finished is not failed for it; its beat says it let go, so the next run
    deletes the lock at once (with a window of minutes, a wait for it to stand still would end
    in ``SessionLockError``, as on d56091b)."""
    monkeypatch.setattr(locks, "DELETE_ATTEMPTS", 2)
    monkeypatch.setattr(locks, "STALE_AFTER", 600.0)
    with flaky_api(os.environ["PREFECT_API_URL"], failures=1000, route=DELETE_LOCK) as (url, refused):
        with temporary_settings({PREFECT_API_URL: url, PREFECT_CLIENT_MAX_RETRIES: 0}):
            first = await create_in_process_client(answer).run("go", session_id=session_id)
            assert await anyio.to_thread.run_sync(drain) == []  # done: it gave up
    assert len(refused) == 2
    assert first.status == "completed", first.error
    assert f'session "{session_id}": could not let go of its lock' in caplog.text
    assert await lock_of(session_id) is not None
    second = await create_in_process_client(answer).run("again", session_id=session_id)
    assert second.status == "completed", second.error
    assert await lock_of(session_id) is None


def _elsewhere(part: int) -> ProcessMark:
    """This process's mark with one part of its machine changed (0: the host, 2: the PID
    namespace): a process that cannot be looked up from here, though its pid is gone here."""
    mark = this_process()
    assert mark is not None, "the tests run where /proc tells"
    parts = mark.machine.split("/")
    parts[part] = f"other-{parts[part]}"
    return mark.model_copy(update={"machine": "/".join(parts), "pid": ended_pid()})


@pytest.mark.parametrize("how", ["its pid is gone", "its pid is another process's"])
async def test_a_holder_whose_process_is_gone_on_this_machine_is_taken_over_at_once(
    session_id, how, monkeypatch, caplog
):
    """A heartbeat window of 10 minutes and a contender that gives up after 20 s: only a
    take-over that does not wait for staleness lets the run start. A pid reused by another
    process (its start time differs: here this very process, started at another tick) is as
    dead as one that is gone."""
    monkeypatch.setattr(locks, "STALE_AFTER", 600.0)
    monkeypatch.setattr(lease, "GIVE_UP_AFTER", 20.0)
    mark = this_process()
    assert mark is not None, "the tests run where /proc tells"
    reused = {"pid": os.getpid(), "started": mark.started - 1}
    dead = mark.model_copy(update={"pid": ended_pid()} if how == "its pid is gone" else reused)
    await held_by(session_id, dead)
    caplog.set_level(logging.WARNING, "nexusflow.session")
    result = await create_in_process_client(answer).run("go", session_id=session_id)
    assert result.status == "completed", result.error
    assert f"died with its process {dead.pid} on this machine: taking the session over" in caplog.text
    assert "has not beaten for" not in caplog.text
    assert await lock_of(session_id) is None


@pytest.mark.slow
@pytest.mark.parametrize("holder", ["another machine", "another PID namespace", "an older version", "a live process"])
async def test_a_holder_not_provably_dead_is_taken_over_only_once_its_beat_is_stale(
    session_id, holder, monkeypatch, caplog
):
    """A mark from another host or PID namespace (its pid, gone here, says nothing there), a
    beat of a version that recorded no process, and a process of this machine that lives but
    stopped beating (frozen) are each taken over by the heartbeat window alone, never at once."""
    monkeypatch.setattr(locks, "STALE_AFTER", 1.0)
    marks = {
        "another machine": lambda: _elsewhere(0),
        "another PID namespace": lambda: _elsewhere(2),
        "an older version": lambda: None,
        "a live process": this_process,
    }
    await held_by(session_id, marks[holder]())
    caplog.set_level(logging.WARNING, "nexusflow.session")
    result = await create_in_process_client(answer).run("go", session_id=session_id)
    assert result.status == "completed", result.error
    assert "has not beaten for" in caplog.text and "taking the session over" in caplog.text
    assert "died with its process" not in caplog.text


@pytest.mark.slow
async def test_a_holder_not_provably_dead_is_never_taken_over_within_the_heartbeat_window(session_id, monkeypatch):
    """The same holders with a heartbeat window longer than the contender waits: each keeps
    its lock and the contender ends with the pinned error, the lock untouched."""
    monkeypatch.setattr(locks, "STALE_AFTER", 600.0)
    monkeypatch.setattr(lease, "GIVE_UP_AFTER", 1.5)
    for n, mark in enumerate([_elsewhere(0), _elsewhere(2), None, this_process()]):
        session = f"{session_id}-{n}"
        lock = await held_by(session, mark)
        result = await create_in_process_client(answer).run("go", session_id=session)
        assert result.status == "failed" and "could not be taken over within 2s" in (result.error or ""), result.error
        assert await lock_of(session) == lock
        async with get_client() as client:
            await client.delete_global_concurrency_limit_by_name(lease.lock_name(session))
