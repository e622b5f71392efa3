"""The fast tier's promise: a test that does not ask for the Prefect server cannot reach one,
in this process or in a process it starts."""

import ast
import errno
import os
import socket
import subprocess
import sys
import urllib.parse
from types import SimpleNamespace

import httpx
import pytest
from prefect.client.orchestration import get_client

from paths import TESTS

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


def test_no_server_can_take_the_port_such_a_test_points_at() -> None:
    """The port is held for the worker's life, so a server started meanwhile by any process
    cannot bind it, even with ``SO_REUSEADDR`` as uvicorn binds (CI44: one only free when
    picked was answered by a Prefect server)."""
    port = urllib.parse.urlsplit(os.environ["PREFECT_API_URL"]).port
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with pytest.raises(OSError) as refused:
            server.bind(("127.0.0.1", port))
    assert refused.value.errno == errno.EADDRINUSE


GROUPED = """
import os, pytest
pytestmark = pytest.mark.xdist_group("heavy")

@pytest.mark.parametrize("n", range(4))
def test_heavy(n):
    print("worker", os.environ["PYTEST_XDIST_WORKER"])
"""


@pytest.mark.slow
def test_the_heavy_group_runs_on_one_worker(tmp_path) -> None:
    """What the README's slow-tier command relies on: ``--dist loadgroup`` sends a module's
    ``xdist_group`` to one worker (pytest 9.2 with pytest-xdist 3.8 spread it over all)."""
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-rA", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.count("@heavy") == 4, "loadgroup sends a test by the group its nodeid names"


def test_the_dask_module_is_collected_without_dask() -> None:
    """Every tier collects ``test_fanout_dask.py``; it imports dask in its fixtures only, so the
    fast tier, which deselects it, loads no dask (some 2 s a process)."""
    tree = ast.parse((TESTS / "topology" / "test_fanout_dask.py").read_text())
    imported = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert not {name.split(".")[0] for name in imported} & {"dask", "distributed", "prefect_dask"}


def test_the_worker_running_the_soak_starts_its_server_only_after_it(monkeypatch, pytestconfig) -> None:
    """The soak starts a server of its own and runs for minutes: the session's server, started
    at its worker's first test, idled through them, on a tier that is CPU-bound
    (benchmarks/README.md). It starts with the first other test, as on every other worker."""
    conftest = pytestconfig.pluginmanager.get_plugin(str(TESTS / "conftest.py"))
    started: list[str] = []
    monkeypatch.setattr(conftest._Server, "wanted", True)
    monkeypatch.setattr(conftest._Server, "start", lambda: started.append("server"))
    soak = SimpleNamespace(nodeid=f"{conftest.STARTED_FIRST[0]}_grows_nothing")
    other = SimpleNamespace(nodeid="tests/server/run/test_flow.py::test_three_turns_with_parallel_calls")

    conftest.pytest_runtest_protocol(soak)
    assert started == []
    conftest.pytest_runtest_protocol(other)
    assert started == ["server"]
    monkeypatch.setattr(conftest._Server, "wanted", False)
    conftest.pytest_runtest_protocol(other)
    assert started == ["server"], "no test collected here asks for a server"
