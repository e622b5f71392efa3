"""The fast tier's promise: a test that does not ask for the Prefect server cannot reach one,
in this process or in a process it starts."""

import os
import subprocess
import sys

import httpx
import pytest
from prefect.client.orchestration import get_client

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_a_test_that_does_not_ask_for_a_server_reaches_none() -> None:
    async with get_client() as client:
        with pytest.raises(httpx.ConnectError):
            await client.hello()


@pytest.mark.slow
def test_a_child_process_of_such_a_test_reaches_none() -> None:
    code = "from prefect.client.orchestration import get_client; print(get_client(sync_client=True).hello())"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PREFECT_CLIENT_MAX_RETRIES": "0"},
    )
    assert done.returncode != 0
    assert "ConnectError" in done.stderr
