"""A tool policy's timeout holds whatever the tool does: a sync tool's thread is abandoned at
the deadline, an async tool that ignores cancellation has its late result dropped, and no
late result reaches the transcript or the stored step."""

import logging
import threading
import time

import anyio
import pytest

from nexusflow import ModelRequest, Toolkit, ToolPolicy, TransientError, create_in_process_client, tool
from nexusflow.testing import ScriptedModel

pytestmark = [pytest.mark.anyio]

THREAD_WARNING = "the function keeps running in the background and its late result is discarded"


def tool_contents(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


def warnings_about(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "nexusflow.toolkit" and r.levelno == logging.WARNING and f'tool "{name}"' in r.getMessage()
    ]


@pytest.mark.slow
async def test_a_hung_sync_tool_times_out_at_its_deadline_and_its_late_result_is_dropped(session_id, caplog):
    caplog.set_level(logging.WARNING, logger="nexusflow.toolkit")
    release, finished = threading.Event(), threading.Event()
    late_effects: list[str] = []

    @tool
    def stuck(text: str) -> str:
        """Hangs for 30 s unless released."""
        release.wait(30)
        late_effects.append(text)
        finished.set()
        return f"late-{text}"

    model = ScriptedModel(
        [
            {"tool_calls": [{"id": "c1", "name": "stuck", "arguments": {"text": "x"}}]},
            lambda request: "saw: " + " | ".join(tool_contents(request)),
        ]
    )
    client = create_in_process_client(model, policies={"stuck": ToolPolicy(timeout=1)})
    async with await Toolkit.load(tools=[stuck]) as toolkit:
        started = time.monotonic()
        result = await client.run("go", toolkit, session_id=session_id)
        elapsed = time.monotonic() - started

        assert result.status == "completed", result.error
        assert elapsed < 20, f"the run waited for the thread: {elapsed:.1f}s"
        assert result.text == 'saw: error: tool "stuck" timed out after 1s'
        assert result.metrics.tool_errors == 1
        assert not finished.is_set(), "the function is still running in its abandoned thread"
        (warning,) = warnings_about(caplog, "stuck")
        assert THREAD_WARNING in warning

        release.set()
        assert finished.wait(10)
        await anyio.sleep(0.2)  # let the finished thread report to the event loop
        assert late_effects == ["x"]
        assert [m.content for m in result.messages if m.role == "tool"] == ['error: tool "stuck" timed out after 1s']

        # The stored step holds the timeout too: running the session again replays it, and
        # neither the model nor the tool runs again.
        again = await create_in_process_client(ScriptedModel([]), policies={"stuck": ToolPolicy(timeout=1)}).run(
            "go", toolkit, session_id=session_id
        )
    assert again.status == "completed", again.error
    assert again.text == result.text
    assert late_effects == ["x"]


async def test_a_sync_tool_raising_transient_errors_is_retried_under_a_timeout(session_id):
    attempts: list[float] = []

    @tool
    def flaky() -> str:
        """Fails twice, then works."""
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise TransientError("connection refused")
        return "worked"

    model = ScriptedModel(
        [{"tool_calls": [{"name": "flaky", "arguments": {}}]}, lambda request: tool_contents(request)[0]]
    )
    client = create_in_process_client(model, policies={"flaky": ToolPolicy(timeout=5, retries=2, retry_delay=0.1)})
    async with await Toolkit.load(tools=[flaky]) as toolkit:
        result = await client.run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "worked"
    assert len(attempts) == 3


async def test_a_timeout_is_retried_when_retry_on_names_timeout_error():
    release = threading.Event()
    attempts: list[int] = []

    @tool
    def hangs_once() -> str:
        """Hangs on its first call only."""
        attempts.append(1)
        if len(attempts) == 1:
            release.wait(30)
        return f"attempt {len(attempts)}"

    kit = Toolkit([hangs_once])
    policy = ToolPolicy(timeout=0.5, retries=1, retry_delay=0, retry_on=(TimeoutError,))
    result = await kit.call("hangs_once", {}, policy)
    release.set()
    assert result.content == "attempt 2" and not result.is_error


@pytest.mark.slow
@pytest.mark.parametrize("how", ["shielded", "blocking"])
async def test_an_async_tool_that_ignores_cancellation_has_its_late_result_dropped(how, caplog):
    caplog.set_level(logging.WARNING, logger="nexusflow.toolkit")

    @tool
    async def stubborn() -> str:
        """Cannot be interrupted."""
        if how == "shielded":
            with anyio.CancelScope(shield=True):
                await anyio.sleep(1.5)
        else:
            time.sleep(1.5)  # blocks the event loop: nothing can cancel it
        return "late"

    kit = Toolkit([stubborn])
    started = time.monotonic()
    result = await kit.call("stubborn", {}, ToolPolicy(timeout=0.3))
    assert result.is_error and result.content == 'error: tool "stubborn" timed out after 0.3s'
    assert time.monotonic() - started >= 1.4, "nothing can interrupt it: the error comes when it returns"
    (warning,) = warnings_about(caplog, "stubborn")
    assert "ignored its 0.3s timeout" in warning and "its late result is discarded" in warning


async def test_an_async_tool_that_honours_cancellation_stops_at_its_deadline():
    @tool
    async def sleeper() -> str:
        """Sleeps a minute."""
        await anyio.sleep(60)
        return "late"

    started = time.monotonic()
    result = await Toolkit([sleeper]).call("sleeper", {}, ToolPolicy(timeout=0.3))
    assert result.content == 'error: tool "sleeper" timed out after 0.3s'
    assert time.monotonic() - started < 5


async def test_a_timeout_error_the_tool_raises_itself_is_its_own_error():
    @tool
    def fetch() -> str:
        """Its socket timed out."""
        raise TimeoutError("read timed out")

    result = await Toolkit([fetch]).call("fetch", {})
    assert result.content == 'error: tool "fetch" raised TimeoutError: read timed out'
