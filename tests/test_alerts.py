"""Alerts out of the box, on a real Prefect server (its triggers and actions services) with a
real notification block pointed at an HTTP receiver on 127.0.0.1: each fault tells one
notification, a healthy run none, installing twice changes nothing, removing stops them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers.command import nexusflow_here

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_server")]

TOOLS = '''
import time
from nexusflow import tool
from nexusflow.suspension import current_answer, suspend

@tool
def deploy(service: str) -> str:
    """Deploy a service."""
    if current_answer() is None:
        return suspend(f"May I deploy {service}?")
    return f"deployed {service}"

@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

@tool
def nap(seconds: float) -> str:
    """Sleep."""
    time.sleep(seconds)
    return "rested"
'''


class Receiver:
    """What a chat webhook would receive: each POST's JSON body, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, str]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", 0))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, done: Callable[[list[dict[str, str]]], bool], timeout: float = 60) -> list[dict[str, str]]:
        deadline = time.monotonic() + timeout
        while not done(self.bodies) and time.monotonic() < deadline:
            time.sleep(0.5)
        return list(self.bodies)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    yield got
    got.server.shutdown()


@pytest.fixture
def block(receiver: Receiver) -> Iterator[str]:
    """A saved notification block that posts ``{subject, body}`` to the receiver."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    name = f"alerts-{uuid.uuid4().hex[:8]}"
    CustomWebhookNotificationBlock(
        name=name, url=receiver.url, json_data={"subject": "{{subject}}", "body": "{{body}}"}
    ).save(name)
    yield f"custom-webhook/{name}"
    from nexusflow import remove_alerts_sync

    remove_alerts_sync()  # a test that failed midway leaves no alert for the next ones


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "alerting_tools.py"
    path.write_text(TOOLS)
    return path


def _ours() -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def names() -> list[str]:
        async with get_client() as client:
            return sorted(a.name for a in await client.read_automations())

    return run_coro_as_sync(names())


def _late_run() -> str:
    """A run of an ``agent-job`` deployment, due now, that no worker will start."""
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def make() -> str:
        async with get_client() as client:
            flow_id = await client.create_flow_from_name("agent-job")
            deployment = await client.create_deployment(flow_id=flow_id, name=f"late-{uuid.uuid4().hex[:6]}")
            run = await client.create_flow_run_from_deployment(
                deployment, state=Scheduled(scheduled_time=datetime.now(UTC))
            )
            return run.name

    return run_coro_as_sync(make())


def test_each_fault_tells_one_notification_and_a_healthy_run_none(capsys, block, receiver, tools):
    from nexusflow import AuthRequired, QuotaExhausted, create_in_process_client

    installed = nexusflow_here(capsys, "alerts", "install", "--notify", block, "--late", "10s", "--stalled", "10s")
    assert installed.returncode == 0, installed.stderr[-3000:]
    late = _late_run()
    tag = uuid.uuid4().hex[:6]
    stalled = subprocess.Popen(
        [sys.executable, "-m", "nexusflow", "run", 'call nap {"seconds": 14}', "--tools", f"{tools}:nap"]
        + ["--session", f"stalls-{tag}"],
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    healthy = nexusflow_here(
        capsys, "run", 'call add {"a": 2, "b": 3}', "--tools", f"{tools}:add", "--session", f"healthy-{tag}"
    )
    assert healthy.returncode == 0, healthy.stderr[-3000:]
    failed = nexusflow_here(
        capsys, "run", 'call add {"a": 2, "b": 3}', "--tools", f"{tools}:add", "--max-turns", "1"
        , "--session", f"fails-{tag}"
    )
    assert failed.returncode == 1, failed.stderr[-3000:]
    waiting = nexusflow_here(
        capsys, "run", 'call deploy {"service": "web"}', "--tools", f"{tools}:deploy", "--session", f"waits-{tag}"
    )
    assert waiting.returncode == 3, waiting.stderr[-3000:]

    def logged_out(request: object) -> str:
        raise AuthRequired("my-api", "token expired", "my-api login")

    auth = create_in_process_client(logged_out).run_sync("go", session_id=f"login-{tag}")
    assert auth.error_type == "AuthRequired"
    resets = datetime(2030, 1, 1, 3, 0, tzinfo=UTC)

    def spent(request: object) -> str:
        raise QuotaExhausted("my-api", resets, "weekly limit")

    quota = create_in_process_client(spent).run_sync("go", session_id=f"quota-{tag}")
    assert quota.error_type == "QuotaExhausted", quota.error
    _, stalled_err = stalled.communicate(timeout=60)
    assert stalled.returncode == 0, stalled_err[-3000:]

    got = receiver.wait_for(lambda bodies: len(bodies) >= 6, timeout=60)
    time.sleep(5)  # any second notification of the same fault would come with the first
    got = list(receiver.bodies)
    print(json.dumps(got, indent=1))
    assert len(got) == 6, got
