"""How often a run asks where result storage is (Prefect asks the server at every lookup),
and that the local storage block a run uses is saved on the server it talks to."""

import asyncio
import errno
import os
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL, temporary_settings

import nexusflow._prefect.storage as storage_module
from nexusflow import Toolkit, create_in_process_client, tool
from nexusflow.testing import ScriptedModel

from helpers.servers import free_port, migrated_home, start_prefect_server, wait_for_prefect_server

pytestmark = [pytest.mark.anyio]


@tool
def echo(text: str) -> str:
    """Returns its argument."""
    return text


async def test_runs_of_one_process_share_one_storage_lookup(monkeypatch, session_id):
    lookups: list[object] = []
    real = storage_module.aget_default_result_storage

    async def counted():
        lookups.append(None)
        return await real()

    monkeypatch.setattr(storage_module, "aget_default_result_storage", counted)
    monkeypatch.setattr(storage_module, "_looked_up", {}, raising=False)
    reply = {"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}
    async with await Toolkit.load(tools=[echo]) as toolkit:
        for n in range(2):
            client = create_in_process_client(ScriptedModel([reply, "done"]))
            result = await client.run("go", toolkit, session_id=f"{session_id}-{n}")
            assert result.status == "completed", result.error
    assert len(lookups) == 1, f"{len(lookups)} lookups for two runs"


async def test_runs_started_together_wait_for_one_lookup(monkeypatch, session_id):
    """Twenty runs gathered at once all miss the empty cache: they share the first lookup."""
    lookups: list[object] = []
    real = storage_module.aget_default_result_storage

    async def counted():
        lookups.append(None)
        await anyio.sleep(0.2)  # a lookup that takes a while, as under load
        return await real()

    monkeypatch.setattr(storage_module, "aget_default_result_storage", counted)
    monkeypatch.setattr(storage_module, "_looked_up", {}, raising=False)
    stored = await asyncio.gather(*(storage_module.step_storage() for _ in range(20)))
    assert len(lookups) == 1, f"{len(lookups)} lookups for twenty runs started together"
    assert len({id(found) for found in stored}) == 1


@pytest.mark.slow
def test_runs_in_threads_looking_up_at_once_all_finish(monkeypatch):
    """Synchronous tasks mapped in a flow each call ``run_sync`` in a thread with its own event
    loop. A lookup lock shared across those loops woke a waiter from the wrong thread, and it
    slept for ever (a README recipe hung in CI)."""
    real = storage_module.aget_default_result_storage

    async def slow():
        await anyio.sleep(0.2)  # the first thread still looks up when the others arrive
        return await real()

    monkeypatch.setattr(storage_module, "aget_default_result_storage", slow)
    monkeypatch.setattr(storage_module, "_looked_up", {})
    monkeypatch.setattr(storage_module, "_atomic", {})
    found: list[object] = []
    threads = [
        threading.Thread(target=lambda: found.append(anyio.run(storage_module.step_storage)), daemon=True)
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), f"{len(found)} of 4 lookups finished; the rest hang"
    assert len(found) == 4


@pytest.mark.slow
@pytest.mark.usefixtures("own_events_worker")
async def test_a_second_server_gets_its_own_local_storage_block(monkeypatch, tmp_path):
    """A process that talks to two servers saves the block on each: one saved on the first
    is unknown to the second, where a task run could not use it."""
    monkeypatch.setattr(storage_module, "_atomic", {})
    monkeypatch.setattr(storage_module, "_looked_up", {})
    first = await storage_module.step_storage()
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": api_url}
    migrated_home(tmp_path / "prefect")
    with ExitStack() as stack:
        server = start_prefect_server(port, env, tmp_path, tmp_path / "server.log", stack)
        wait_for_prefect_server(api_url, server, tmp_path / "server.log")
        with temporary_settings({PREFECT_API_URL: api_url}):
            second = await storage_module.step_storage()
            async with get_client() as client:
                saved = await client.read_block_document(second._block_document_id)
    assert second.basepath == first.basepath
    assert saved.name == first._block_document_name


def _path_of(handle: int) -> str:
    return os.readlink(f"/proc/self/fd/{handle}")


async def test_a_tool_starts_only_once_its_turn_is_on_disk_and_the_next_turn_does_not_wait(
    monkeypatch, session_id, storage
):
    """A step record is put in place at once and synced to disk while Prefect finishes the
    step. The tool waits for the sync of the turn that asked for it (each turn's sync takes
    0.3 s here); the next model turn does not wait for the tool's: that sync is held until
    the model has been asked again (it would hold for 20 s and fail the test if the turn
    waited). The run reports its end only once every record is synced."""
    real_fsync = os.fsync
    synced: list[str] = []
    asked_again = threading.Event()
    held: list[bool] = []
    steps = f"{storage / 'nexusflow' / 'sessions' / session_id / 'steps'}/"

    def slow_fsync(handle: int) -> None:
        path = _path_of(handle)
        if not path.startswith(steps):
            real_fsync(handle)
            return
        if "/tool/" in path:
            held.append(asked_again.wait(timeout=20))
        else:
            time.sleep(0.3)
        real_fsync(handle)
        synced.append(path)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    seen: list[list[str]] = []

    @tool
    async def look(text: str) -> str:
        """Notes which of the session's records are synced when it runs."""
        seen.append(list(synced))
        return text

    def answer(request: object) -> str:
        asked_again.set()
        return "done"

    reply = {"tool_calls": [{"name": "look", "arguments": {"text": "x"}}]}
    model = ScriptedModel([reply, answer])
    async with await Toolkit.load(tools=[look]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert len(seen) == 1 and any("/0/turn/" in path for path in seen[0]), seen
    assert held == [True], "the second turn waited for the tool record's sync"
    assert sorted(path.split("/")[-2] for path in synced) == ["tool", "turn", "turn"], synced
    assert all(Path(path).exists() for path in synced)


async def test_a_record_that_cannot_be_synced_fails_the_run_before_the_next_step(monkeypatch, session_id, storage):
    """An I/O error while syncing a record (a failing disk: no other way to cause it here
    than to make ``fsync`` fail) fails the run with the storage error naming the step, the
    step after it never runs, and the record is removed, so that a resume runs it again."""
    real_fsync = os.fsync

    def failing_fsync(handle: int) -> None:
        if _path_of(handle).startswith(f"{storage}/nexusflow/sessions/{session_id}/steps/0/turn/"):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(handle)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    ran: list[str] = []

    @tool
    async def act(text: str) -> str:
        """A side effect."""
        ran.append(text)
        return text

    reply = {"tool_calls": [{"name": "act", "arguments": {"text": "x"}}]}
    async with await Toolkit.load(tools=[act]) as toolkit:
        result = await create_in_process_client(ScriptedModel([reply, "done"])).run(
            "go", toolkit, session_id=session_id
        )
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith(
        f"storage: the result of turn-0 could not be stored under nexusflow/sessions/{session_id}/steps/0/turn/0-"
    )
    assert result.error.endswith("OSError: [Errno 5] Input/output error"), result.error
    assert ran == [], "the tool ran although the turn that asked for it was not on disk"
    assert not list((storage / session_id / "0" / "turn").glob("*")), "the unsynced record (or a temp file) is left"


@pytest.mark.slow
async def test_a_large_step_record_is_stored_whole_and_replays(session_id, storage):
    """A 5 MB tool result goes through the same write as a small one (in place, then synced
    behind the run) and comes back byte for byte when the session runs again."""
    big = "".join(f"{n:07d}\n" for n in range(625_000))
    calls: list[int] = []

    @tool
    async def dump(n: int) -> str:
        """A large result."""
        calls.append(n)
        return big

    def model(request):
        results = [m.content for m in request.messages if m.role == "tool"]
        if not results:
            return {"tool_calls": [{"name": "dump", "arguments": {"n": 1}}]}
        return f"got {len(results[0])} characters, last line {results[0].splitlines()[-1]}"

    roomy = 8 * 2**20  # past the default 1 MiB result bound: a record this large is what is under test
    async with await Toolkit.load(tools=[dump]) as toolkit:
        first = await create_in_process_client(model, max_tool_result=roomy).run("go", toolkit, session_id=session_id)
        again = await create_in_process_client(model, max_tool_result=roomy).run("go", toolkit, session_id=session_id)
    assert first.status == again.status == "completed", (first.error, again.error)
    assert first.text == again.text == f"got {len(big)} characters, last line 0624999"
    assert calls == [1], "the stored call ran again"
    assert again.metrics.replayed_tool_calls == 1
    assert not list((storage / session_id).rglob("*.part")), "a temporary file is left"
