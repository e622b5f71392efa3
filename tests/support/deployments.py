"""The repository's prefect.yaml deployed to the session's server, and reading its runs'
states: shared by the tests of deployments and of cancelling one."""

import os
import subprocess
import sys
import time
from uuid import UUID

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State

from paths import REPO


def prefect(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "prefect", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def deployed(prefect_server) -> None:
    prefect("work-pool", "create", "local", "--type", "process", "--overwrite")
    done = prefect("--no-prompt", "deploy", "--all")
    for name in ("weather-report", "approval-demo", "nightly-triage", "claude-canary"):
        assert name in done.stdout + done.stderr


async def state_of(flow_run_id: UUID) -> State | None:
    async with get_client() as client:
        return (await client.read_flow_run(flow_run_id)).state


async def wait_for_state(flow_run_id: UUID, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = await state_of(flow_run_id)
        if check(state):
            return state
        await anyio.sleep(0.5)
    raise AssertionError(f"flow run {flow_run_id} stayed {await state_of(flow_run_id)}")
