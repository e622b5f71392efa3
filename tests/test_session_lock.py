"""The session lock (``nexusflow._lease``) against a real server: nothing of it outlives a
run, a lock left by nexusflow's earlier leases is taken over, a take-over that cannot
succeed ends with its pinned error, and a holder that lost its lock stops. Crashes and
races across processes and servers are in ``test_server_places.py``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings
from pydantic import BaseModel

import nexusflow._lease as lease
import nexusflow._locks as locks
from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool
from nexusflow._liveness import this_process
from nexusflow._storage import holding, step_storage, write_record

from conftest import _HOME as HOME
from helpers.flaky_api import flaky_api

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("prefect_server")]

DELETE_LOCK = r"DELETE /api/v2/concurrency_limits/[^/]+"


async def lock_of(session_id: str) -> uuid.UUID | None:
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
    with flaky_api(os.environ["PREFECT_API_URL"], failures=2, route=DELETE_LOCK) as (url, refused):
        with temporary_settings({PREFECT_API_URL: url}):
            result = await create_in_process_client(answer).run("go", session_id=session_id)
    assert len(refused) == 2
    assert result.status == "completed", result.error
    assert await lock_of(session_id) is None
    assert "retryable status code 503" not in caplog.text


async def test_a_take_over_and_the_runs_after_it_never_make_the_server_log_a_conflict(session_id):
    """The session's lock is held by a run whose process died on this machine. The next run
    reads the lock before creating one, since the dead holder's beat was never released. On
    d56091b it created first, and the server logged the conflict as an unhandled
    ``IntegrityError``. The runs after it find the beat their predecessor released and create
    the lock at once."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    process = this_process().model_copy(update={"pid": int(ended.stdout)})
    lock = await make_lock(session_id)
    beat = lease.Heartbeat(
        session_id=session_id, flow_run_id=str(uuid.uuid4()), beat=3, at=time.time(), lock_id=str(lock), process=process
    )
    with holding(session_id):  # as the dead holder wrote it
        await write_record(beat, "sessions", session_id, "lease.json", storage=await step_storage())
    log = HOME / "server.log"
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
    assert len(refused) == 2
    assert first.status == "completed", first.error
    assert f'session "{session_id}": could not let go of its lock' in caplog.text
    assert await lock_of(session_id) is not None
    second = await create_in_process_client(answer).run("again", session_id=session_id)
    assert second.status == "completed", second.error
    assert await lock_of(session_id) is None
