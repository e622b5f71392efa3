"""One real Prefect server per test session (per xdist worker), in a temporary PREFECT_HOME,
started only when a collected test asks for it, and then with the first test (``_Server``):
it boots while the tests that need no server, which run first, run.

The folders are tiers and areas, each folder's conftest applying its marker and the server
once: ``offline/`` (no server), ``server/<area>/`` (the session's server: ``transports``,
``run``, ``state``, ``operator``), ``homes/`` (servers and homes of their own; ``slow``),
``live/``, ``topology/``, ``ui/``; ``support/`` holds the fixture modules and ``helpers/``.
A test outside ``server/`` and ``live/`` runs with the API pointed at a closed port, so one
that needs a server without saying so fails at once instead of passing on a server another
test started.

The environment is set at import, before anything imports prefect, and is inherited by
every child process a test starts (crash-and-resume runs, the command line).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

sys.path.insert(0, str(Path(__file__).parent / "support"))
"""The tests' support: fixture modules (``cli_fixtures``, ``acp_fixtures``, ``approvals``, ``live_agents``,
``topology``, ``deployments``...), ``paths`` and ``helpers/``, the scripts and helpers tests
run; importable by name from every folder."""

from helpers.servers import database_template, free_port, migrated_home, untraced  # noqa: E402
from paths import HELPERS  # noqa: E402

_HOME = Path(tempfile.mkdtemp(prefix="nexusflow-tests-"))
atexit.register(shutil.rmtree, _HOME, True)  # a process that never started the server leaves none behind
_PORT = free_port()
_CLOSED = socket.socket()
"""Held for the process's life: bound, never listening, so a connection to it is refused and
no server can take its port (a port only free when picked was later answered by a Prefect
server, and CI44's two tests of a test without a server reached it)."""
_CLOSED.bind(("127.0.0.1", 0))
_CLOSED_PORT = _CLOSED.getsockname()[1]
os.environ.update(
    {
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "PREFECT_HOME": str(_HOME),
        "PREFECT_LOCAL_STORAGE_PATH": str(_HOME / "storage"),
        "PREFECT_API_URL": f"http://127.0.0.1:{_PORT}/api",
        "PREFECT_LOGGING_LEVEL": "INFO",
    }
)

# Imported only now: they import nexusflow, hence prefect, which must see the settings above.
from acp_fixtures import ScriptedAgent  # noqa: E402
from approvals import Approval  # noqa: E402
from cli_fixtures import FAKE_CLI, FakeCli  # noqa: E402
from helpers.mcp_endpoints import http_mcp_server  # noqa: E402


@pytest.fixture(autouse=True)
def _no_server_unless_asked(request: pytest.FixtureRequest) -> Iterator[None]:
    if "prefect_server" in request.fixturenames:
        yield
        return
    from prefect.context import SettingsContext, get_settings_context

    closed = f"http://127.0.0.1:{_CLOSED_PORT}/api"
    # Copied, not rebuilt: temporary_settings validates every setting again, 48 ms a test.
    # No retries: a connection refused fails at once.
    current = get_settings_context().settings
    settings = current.model_copy(
        update={
            "api": current.api.model_copy(update={"url": closed}),
            "client": current.client.model_copy(update={"max_retries": 0}),
        }
    )
    with (
        pytest.MonkeyPatch.context() as env,
        SettingsContext(profile=get_settings_context().profile, settings=settings),
    ):
        env.setenv("PREFECT_API_URL", closed)
        env.setenv("PREFECT_CLIENT_MAX_RETRIES", "0")
        yield


class _Server:
    """The session's server, started when this process begins its first test, if collection
    shows a test will need it: it boots (about 5 s on a migrated copy of the database, 12 s on
    a fresh one) while the tests that need no server run, which collection puts first. Not
    during a test of ``STARTED_FIRST``: the worker running the soak would keep it idle for
    the soak's minutes. Started from a thread, which then makes the copies' source if the
    machine has none yet (9 s), without holding the server up."""

    wanted = False
    """Whether a test collected here asks for the server."""

    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    starting: threading.Thread | None = None
    spawned = threading.Event()

    @classmethod
    def start(cls) -> None:
        if cls.starting is None:
            cls.starting = threading.Thread(target=cls._spawn, name="prefect-server-start", daemon=True)
            cls.starting.start()

    @classmethod
    def started(cls) -> subprocess.Popen[bytes]:
        cls.start()
        cls.spawned.wait()
        if cls.process is None:
            raise RuntimeError(f"the Prefect server did not start:\n{(_HOME / 'server.log').read_text()[-3000:]}")
        return cls.process

    @classmethod
    def _spawn(cls) -> None:
        try:
            cls.log = open(_HOME / "server.log", "wb")
            seeded = migrated_home(_HOME, make=False)
            cls.process = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(_PORT)],
                stdout=cls.log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=untraced(dict(os.environ)),
            )
        finally:
            cls.spawned.set()
        if not seeded:
            # for the servers started after this one, which migrates its own; one that fails
            # here fails again, with its message, in the test that starts the next server
            with contextlib.suppress(Exception):
                database_template()

    @classmethod
    def stop(cls) -> None:
        if cls.starting is not None:
            cls.starting.join()
        server, cls.process = cls.process, None
        if server is None:
            return
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=5)  # a server still busy with a backlog has nothing left to say
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        if cls.log is not None:
            cls.log.close()


STARTED_FIRST = ("tests/homes/test_soak.py::test_a_soak_of_the_mix", "tests/homes/test_night.py::")
"""The longest tests (minutes, mostly waiting on a server of their own) start before all
others, beside them: started last, one is the tier's tail."""


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what will not run
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    served = {item for item in items if "prefect_server" in getattr(item, "fixturenames", ())}
    _Server.wanted = bool(served)
    first = [item for item in items if item.nodeid.startswith(STARTED_FIRST)]
    rest = [item for item in items if item not in first]
    items[:] = first + [item for item in rest if item not in served] + [item for item in rest if item in served]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> None:
    if _Server.wanted and not item.nodeid.startswith(STARTED_FIRST):
        _Server.start()


@pytest.hookimpl(trylast=True)  # after the session's fixtures are torn down
def pytest_sessionfinish() -> None:
    """A server started for tests that another xdist worker ended up running."""
    _Server.stop()


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[str]:
    server = _Server.started()
    url = os.environ["PREFECT_API_URL"]
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Prefect server did not start:\n{(_HOME / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        _drain_prefect_workers()
        _Server.stop()
        shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def locks_let_go_within_their_test() -> Iterator[None]:
    """After each test, the session locks its runs let go of are deleted (``let_go`` makes
    them a second after a run returned): on the server the test used, while it is up, and
    never in the next test, whose log would get their warnings. Nothing to wait for without a
    run."""
    yield
    let_go = sys.modules.get("nexusflow._prefect.let_go")  # not imported: no run let go of one
    if let_go is not None:
        let_go.drain(within=30)


@pytest.fixture(autouse=True)
def events_reach_the_session_server() -> Iterator[None]:
    """After each test, an events worker bound to another API (a topology's server, a
    proxy, a closed port) is stopped, so that a new one is made for the next test. Prefect
    keys its one events worker per process by client type, not by API, so such a worker
    would send every later test's events, and the task runs the server records from them,
    to a server that is gone: a later test then waits for task runs that never come (CI
    saw it in test_compose). Reads the worker's client: Prefect has no public way to ask."""
    yield
    from prefect.events.worker import EventsWorker

    url = (os.environ.get("PREFECT_API_URL") or "").rstrip("/")
    for worker in tuple(EventsWorker._instances.values()):
        bound = getattr(getattr(worker, "_client", None), "_api_url", None)
        if isinstance(worker, EventsWorker) and isinstance(bound, str) and bound.rstrip("/") != url:
            EventsWorker.drain_all(timeout=10)
            return


@pytest.fixture
def own_events_worker() -> Iterator[None]:
    """For a test that points this process at another API (a proxy): Prefect keeps one
    events worker per process, bound to the API of the moment it started, so one started
    for the proxy would send every later test's events to the stopped proxy. Stopped (and
    so made again) before and after the test."""
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=10)
    yield
    EventsWorker.drain_all(timeout=10)


def _drain_prefect_workers() -> None:
    """Send the logs and events still queued in this process while the server is up;
    otherwise Prefect's exit hook sends them to a stopped server and prints an error. At
    most 10 s in all: stopping a worker waits for its lock, which a worker sending a batch to
    a busy server holds through the client's retries (41 s at the end of a CI run)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    def drain() -> None:
        APILogWorker.drain_all(timeout=5)
        EventsWorker.drain_all(timeout=5)

    draining = threading.Thread(target=drain, daemon=True)
    draining.start()
    draining.join(timeout=10)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def storage() -> Path:
    return Path(os.environ["PREFECT_LOCAL_STORAGE_PATH"])


@pytest.fixture
def session_id(request: pytest.FixtureRequest) -> str:
    """A fresh session id per test, so tests never replay each other's steps."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60]
    return f"{name}-{os.urandom(4).hex()}"


@pytest.fixture
def output_types(tmp_path: Path) -> Path:
    """The command's output types (tests/support/helpers/output_types.py) copied into a file of
    the test's own, with postponed annotations: a dataclass there resolves its fields through
    its module, which must be importable by name."""
    path = tmp_path / "output_types.py"
    path.write_text((HELPERS / "output_types.py").read_text())
    return path


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeCli:
    """A fake agent CLI (tests/support/helpers/fake_cli.py) recording into a fresh folder."""
    root = tmp_path / "fake-cli"
    root.mkdir()
    monkeypatch.setenv("FAKE_CLI_DIR", str(root))
    return FakeCli(root)


@pytest.fixture
def claude_on_path(fake: FakeCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake CLI installed as ``claude`` in a folder of its own at the front of PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    binary = folder / "claude"
    shutil.copy(FAKE_CLI, binary)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return binary


@pytest.fixture
def agent(tmp_path: Path) -> ScriptedAgent:
    """A scripted ACP agent (tests/support/helpers/acp_agent.py) recording into a fresh folder."""
    root = tmp_path / "acp-agent"
    root.mkdir()
    return ScriptedAgent(root)


@pytest.fixture
def approval() -> Approval:
    """A gated ``deploy`` tool (tests/support/approvals.py) with a record of its own."""
    return Approval.fresh()


@pytest.fixture(scope="module")
def http_server() -> Iterator[tuple[str, str]]:
    """The test MCP server over streamable HTTP (tests/support/helpers/mcp_endpoints.py): its
    URL and the bearer token it wants."""
    with http_mcp_server() as served:
        yield served
