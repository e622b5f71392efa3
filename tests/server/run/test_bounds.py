"""Every input of a run is bounded, and passing a bound is an outcome the model or the user
sees, never a hang or a crash (issue 41): tool calls per reply, tool calls at once, a tool
result's size, the depth of a call's arguments; and a tool that raises ``KeyboardInterrupt``,
``SystemExit`` or another ``BaseException``. Runs on the session's server; the bounds that
need none (the options and settings, the command's durations, session ids) are
tests/offline/test_bounded_inputs.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from nexusflow import Toolkit, create_in_process_client, tool
from nexusflow._prefect.artifact_keys import artifact_key
from nexusflow._prefect.storage import session_prefix, step_storage

from helpers.calling_model import Calls


class InFlight:
    """An async tool, ``count``, that counts the calls running at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.ran = 0

        async def count(n: int) -> str:
            """Count."""
            self.now += 1
            self.most = max(self.most, self.now)
            await anyio.sleep(0.05)
            self.now -= 1
            self.ran += 1
            return f"ok {n}"

        self.tool = tool(count)


@pytest.mark.anyio
async def test_a_reply_of_10000_calls_runs_the_first_64_and_tells_the_model_of_the_rest(session_id: str) -> None:
    """Before the bound: all 10,000 started at once (on ad9173b this test ignored a SIGINT at
    100 s and was killed after 12 minutes, unfinished)."""
    counter = InFlight()
    model = Calls([("count", json.dumps({"n": n})) for n in range(10_000)])
    client = create_in_process_client(model)
    started = time.monotonic()
    async with Toolkit([counter.tool]) as toolkit:
        result = await client.run("go", toolkit, session_id=session_id)
    print(f"10,000 calls in one reply: {time.monotonic() - started:.1f}s")
    assert result.status == "completed", result.error
    assert counter.ran == 64
    assert counter.most <= 16
    assert model.read[:64] == [f"ok {n}" for n in range(64)]
    refused = (
        'error: tool "count" was not run: the reply asked for 10000 tool calls, and at most 64 run per reply'
        " (max_tool_calls); ask again for those still needed"
    )
    assert model.read[64:] == [refused] * (10_000 - 64)
    assert (result.metrics.tool_calls, result.metrics.tool_errors) == (10_000, 10_000 - 64)


@pytest.mark.anyio
async def test_the_calls_of_one_reply_run_at_most_16_at_once(session_id: str) -> None:
    """Before the bound: all 64 ran at once (on ad9173b ``most`` was 64)."""
    counter = InFlight()
    model = Calls([("count", json.dumps({"n": n})) for n in range(64)])
    async with Toolkit([counter.tool]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
        assert result.status == "completed", result.error
        assert counter.ran == 64
        assert 1 < counter.most <= 16  # side by side, within the bound
        # Both bounds are options, and settings.
        again = InFlight()
        model = Calls([("count", json.dumps({"n": n})) for n in range(6)])
        client = create_in_process_client(model, max_tool_calls=5, max_parallel_tool_calls=2)
        async with Toolkit([again.tool]) as kit:
            result = await client.run("go", kit, session_id=f"{session_id}-2")
    assert result.status == "completed", result.error
    assert again.ran == 5 and again.most <= 2
    assert model.read[5].startswith('error: tool "count" was not run: the reply asked for 6 tool calls')


@pytest.mark.anyio
async def test_an_oversized_tool_result_is_an_error_the_model_reads_and_is_never_stored(session_id: str) -> None:
    """Before the bound: the 2 MiB result went to the model, the step's record and the
    transcript artifact whole (on ad9173b the model read it: the first assert failed)."""

    @tool
    def big() -> str:
        """Two MiB of text."""
        return "x" * (2 * 2**20)

    @tool
    def small() -> str:
        """Right at a 1000-byte limit: "é" is two bytes."""
        return "é" * 500

    model = Calls([("big", "{}"), ("small", "{}")])
    async with Toolkit([big, small]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert model.read == ['error: tool "big" returned 2097152 bytes, over the 1 MiB result limit', "é" * 500]
    storage = Path(str((await step_storage()).basepath)).expanduser() / session_prefix(session_id)
    sizes = [path.stat().st_size for path in storage.rglob("*") if path.is_file()]
    assert sizes and max(sizes) < 2**20
    async with get_client() as prefect:
        key = artifact_key("transcript", session_id)
        found = await prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert found and all(len(str(artifact.data)) < 2**20 for artifact in found)

    limited = Calls([("small", "{}")])
    async with Toolkit([small]) as toolkit:
        client = create_in_process_client(limited, max_tool_result=999)
        result = await client.run("go", toolkit, session_id=f"{session_id}-2")
    assert result.status == "completed", result.error
    assert limited.read == ['error: tool "small" returned 1000 bytes, over the 999 bytes result limit']


@pytest.mark.anyio
async def test_arguments_nested_too_deep_are_an_error_the_model_reads(session_id: str) -> None:
    """Before the bound: 100,000 levels failed the run with RecursionError (on ad9173b the
    run failed: ``RecursionError: maximum recursion depth exceeded``)."""
    ran: list[Any] = []

    @tool
    def echo(value: Any = None) -> str:
        """Echo."""
        ran.append(value)
        return "echoed"

    deep = '{"value": ' + "[" * 100_000 + "]" * 100_000 + "}"
    just = '{"value": ' + "[" * 63 + "]" * 63 + "}"
    over = '{"value": ' + "[" * 64 + "]" * 64 + "}"
    model = Calls([("echo", deep), ("echo", just), ("echo", over)])
    async with Toolkit([echo]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    too_deep = 'error: invalid arguments for tool "echo": they nest deeper than 64 levels (max_argument_depth)'
    assert model.read == [too_deep, "echoed", too_deep]
    assert len(ran) == 1


@pytest.mark.anyio
async def test_keyboard_interrupt_and_system_exit_from_a_tool_propagate_as_themselves(session_id: str) -> None:
    """Before: ``run_sync`` raised a ``BaseExceptionGroup`` (on ad9173b ``client.run`` ended
    with ``BaseExceptionGroup([KeyboardInterrupt()])`` and Prefect's run-sync loop thread died
    of the interrupt)."""

    @tool
    def interrupt() -> str:
        """Ctrl-C in the middle of a tool."""
        raise KeyboardInterrupt

    @tool
    def leave() -> str:
        """A tool that calls sys.exit."""
        raise SystemExit(3)

    for name, raised in (("interrupt", KeyboardInterrupt), ("leave", SystemExit)):
        client = create_in_process_client(Calls([(name, "{}"), (name, "{}")]))
        run = partial(client.run_sync, "go", Toolkit([interrupt, leave]), session_id=f"{session_id}-{name}")
        with pytest.raises(raised) as caught:
            await anyio.to_thread.run_sync(run)
        assert type(caught.value) is raised


@pytest.mark.anyio
async def test_another_base_exception_from_a_tool_is_an_error_the_model_reads(session_id: str) -> None:
    """Before: it failed the run (on ad9173b ``client.run`` raised a ``BaseExceptionGroup``)."""

    class Odd(BaseException):
        pass

    @tool
    def odd() -> str:
        """Raises what is no Exception."""
        raise Odd("strange")

    model = Calls([("odd", "{}")])
    async with Toolkit([odd]) as toolkit:
        result = await create_in_process_client(model).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert model.read == ['error: tool "odd" raised Odd: strange']


@pytest.mark.slow  # a process of its own
def test_the_command_says_one_line_when_a_tool_interrupts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, session_id: str
) -> None:
    """Before: two tracebacks (on ad9173b ``main`` raised the ``BaseExceptionGroup``)."""
    tools = tmp_path / "stops.py"
    tools.write_text("def stop() -> str:\n    raise KeyboardInterrupt\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "stop", "arguments": {}}]}, "done"]))
    argv = ["run", "go", "--tools", f"{tools}:stop", "--script", str(script), "--session", session_id]
    ran = subprocess.run(  # a process of its own: an interrupt inside a pytest-xdist worker stops the worker
        [sys.executable, "-m", "nexusflow", *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 130, ran.stderr[-3000:]
    (said,) = [line for line in ran.stderr.splitlines() if line.startswith("nexusflow:") or "Traceback" in line]
    assert said.startswith("nexusflow: interrupted; go on with: ")
    assert said.endswith(f"run --session {session_id}")
