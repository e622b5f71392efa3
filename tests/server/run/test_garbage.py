"""A run leaves nothing holding a thread-local to the garbage collector. On CPython before
3.11.9, collecting one while another thread lists every thread's frames (Dask's worker
profiler does, every 10 ms while a task runs) deadlocks the process (CPython gh-106883,
dask/distributed#8616): tenacity's retrying objects, one per turn, tool call and server call,
each left one, and a Dask worker running members froze (``nexusflow._support.retrying``)."""

from __future__ import annotations

import gc
import threading

import pytest

from nexusflow import ModelRequest, Toolkit, ToolPolicy, TransientError, create_in_process_client, tool

pytestmark = [pytest.mark.anyio]


async def test_a_run_with_model_and_tool_retries_leaves_no_thread_local_to_the_garbage_collector(session_id):
    failed: set[str] = set()

    def once(what: str) -> None:
        if what not in failed:
            failed.add(what)
            raise TransientError(f"{what}: connection refused")

    @tool
    def work() -> str:
        """Fails once, then works."""
        once("tool")
        return "worked"

    def model(request: ModelRequest) -> object:
        turn = sum(message.role == "assistant" for message in request.messages)
        once(f"turn {turn}")
        return {"tool_calls": [{"name": "work", "arguments": {}}]} if turn == 0 else "done"

    client = create_in_process_client(
        model, model_retries=1, model_retry_wait=0.01, policies={"work": ToolPolicy(retries=1, retry_delay=0)}
    )
    await client.run("warm up", Toolkit([work]), session_id=f"{session_id}-warm")  # imports and caches
    failed.clear()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector frees is kept in gc.garbage, to be read
    try:
        result = await client.run("go", Toolkit([work]), session_id=session_id)
        gc.collect()
        left = [type(thing).__name__ for thing in gc.garbage if isinstance(thing, threading.local)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert result.status == "completed", result.error
    assert result.metrics.model_retries == 2, "each turn failed once and was retried"
    assert len(failed) == 3, "the tool failed once and was retried"
    assert left == []
