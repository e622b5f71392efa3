"""A CLI that misbehaves as a process: floods its output, leaves a daemon holding our pipes,
or prints nothing. Real processes, and a real Prefect run where a user would meet them."""

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from nexusflow import CliError, CliStyles, ModelRequest, Transport, create_cli_client
from nexusflow.transports.oneshot import CliConfig, CliStyle, CliTransport
from nexusflow.transports.oneshot.process import DRAIN_GRACE

from cli_fixtures import alive

pytestmark = [pytest.mark.anyio]

FLOOD = """
import json, os, sys
open(os.environ["RECORD"], "w").write(json.dumps({"cli": os.getpid()}))
stream = getattr(sys, sys.argv[1]).buffer
block = b"x" * 2**20
while True:
    stream.write(block)
"""

DAEMON = """
import json, os, subprocess, sys, time
sys.stdin.read()
environment = {} if sys.argv[1] == "scrubbed" else None
sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
child = subprocess.Popen(sleeper, start_new_session=True, env=environment)
print('{"content": "the answer"}', flush=True)
record = {"cli": os.getpid(), "daemon": child.pid, "exited_at": time.time()}
open(os.environ["RECORD"], "w").write(json.dumps(record))
if sys.argv[2] == "hang":
    time.sleep(600)
"""
"""Prints its answer and exits (or hangs), leaving a grandchild in a session of its own
(``setsid``) that inherited stdout and stderr and sleeps ten minutes; ``scrubbed`` starts
it with an empty environment."""


def script_client(code: str, *args: str, record: Path, **options):
    return create_cli_client(
        CliStyles.CUSTOM,
        command=sys.executable,
        args=["-c", code, *args],
        prompt_mode="stdin",
        transport=Transport.CLI,
        env={"RECORD": str(record)},
        **options,
    )


def high_water_reset() -> int:
    """Reset the peak resident size of this process and return the current one (bytes)."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def _status(field: str) -> int:
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


async def gone(pid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    return not alive(pid)


@pytest.fixture
def record(tmp_path: Path) -> Iterator[Path]:
    """Where a script CLI records its pids. Test hygiene: a daemon the code under test
    failed to kill is killed here, so that it never outlives the test."""
    path = tmp_path / "record.json"
    yield path
    if path.exists():
        daemon = json.loads(path.read_text()).get("daemon")
        if daemon and alive(daemon):
            os.kill(daemon, signal.SIGKILL)


# ---- 1. unbounded output ------------------------------------------------------------------


async def test_a_cli_flooding_stderr_fails_the_run_at_the_default_cap_with_bounded_memory(session_id, record):
    client = script_client(FLOOD, "stderr", record=record, timeout=20)
    rss_before = high_water_reset()
    started = time.monotonic()
    result = await client.run("flood", session_id=session_id)
    elapsed = time.monotonic() - started
    growth = _status("VmHWM") - rss_before
    print(f"flood: failed after {elapsed:.2f}s, peak RSS growth {growth / 2**20:.1f} MiB")
    assert result.status == "failed"
    assert result.error == "cli: stderr passed the 16 MiB output limit"
    assert elapsed < 10
    assert growth < 160 * 2**20
    assert await gone(json.loads(record.read_text())["cli"])


async def test_the_cap_is_configurable_and_covers_stdout(session_id, record):
    client = script_client(FLOOD, "stdout", record=record, timeout=20, max_output=2**20)
    result = await client.run("flood", session_id=session_id)
    assert result.status == "failed"
    assert result.error == "cli: stdout passed the 1 MiB output limit"
    assert await gone(json.loads(record.read_text())["cli"])


# ---- 2. a daemonising grandchild ------------------------------------------------------------


async def test_a_setsid_grandchild_holding_the_pipes_neither_delays_the_turn_nor_outlives_it(session_id, record):
    client = script_client(DAEMON, "tagged", "exit", record=record, timeout=30)
    started = time.monotonic()
    result = await client.run("hi", session_id=session_id)
    ended = time.time()
    elapsed = time.monotonic() - started
    launched = json.loads(record.read_text())
    print(f"daemon: the run ended {ended - launched['exited_at']:.2f}s after the CLI exited ({elapsed:.2f}s in all)")
    assert result.status == "completed", result.error
    assert result.text == "the answer"
    assert elapsed < 15
    assert await gone(launched["daemon"])


STDIN = CliStyle(name="plain", args=[], prompt_mode="stdin", verified="x")


def script_transport(code: str, *args: str, record: Path, **config) -> CliTransport:
    style = STDIN.model_copy(update={"args": ["-c", code, *args]})
    return CliTransport(CliConfig(style=style, command=sys.executable, env={"RECORD": str(record)}, **config))


def request() -> ModelRequest:
    return ModelRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "tools": []})


async def test_the_turn_ends_at_once_after_the_cli_exits(record):
    reply = await script_transport(DAEMON, "tagged", "exit", record=record, timeout=30).generate(request())
    launched = json.loads(record.read_text())
    after_exit = time.time() - launched["exited_at"]
    print(f"daemon: generate returned {after_exit * 1000:.0f}ms after the CLI exited")
    assert reply.content == "the answer"
    assert after_exit < DRAIN_GRACE
    assert await gone(launched["daemon"])


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["timeout", "cancel"])
async def test_a_setsid_grandchild_is_killed_on_timeout_and_on_cancellation(record, ending):
    transport = script_transport(DAEMON, "tagged", "hang", record=record, timeout=2 if ending == "timeout" else 60)
    if ending == "timeout":
        with pytest.raises(CliError, match="^cli: timed out after 2000ms$"):
            await transport.generate(request())
    else:
        with anyio.move_on_after(2):
            await transport.generate(request())
    launched = json.loads(record.read_text())
    assert await gone(launched["cli"]) and await gone(launched["daemon"])


async def test_a_daemon_that_scrubbed_its_environment_holds_the_turn_for_the_grace_only(record):
    """The documented limit: without the tag it survives (the fixture kills it), but the
    pipes it holds are let go."""
    reply = await script_transport(DAEMON, "scrubbed", "exit", record=record, timeout=30).generate(request())
    after_exit = time.time() - json.loads(record.read_text())["exited_at"]
    assert reply.content == "the answer"
    assert DRAIN_GRACE * 0.9 <= after_exit < DRAIN_GRACE + 2


# ---- 4. an empty reply from a JSON-answer style -------------------------------------------


@pytest.mark.parametrize("style", [CliStyles.CLAUDE, CliStyles.GEMINI], ids=lambda s: s.value)
async def test_an_empty_stdout_from_a_json_answer_style_is_the_pinned_empty_reply(fake, session_id, style):
    fake.script({"stdout": ""})
    client = create_cli_client(style=style, command=fake.command, transport=Transport.CLI, model="m")
    result = await client.run("hi", session_id=session_id)
    assert result.status == "failed"
    assert result.error == "cli: empty reply"
