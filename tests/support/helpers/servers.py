"""Servers on loopback, for the tests and the benchmarks alike: a free port, a throwaway
PostgreSQL cluster and ``prefect server start``. Every process runs in its own session
(``start_new_session``), so stopping it stops its children, and is stopped by the
``ExitStack`` it was started with.

It imports nothing from Prefect (``nexusflow._prefect.server`` does not either): conftest.py uses it
before Prefect's settings are set.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path
from typing import Any

from nexusflow._prefect.server import free_port_for_a_server


def free_port() -> int:
    """A port for a server another process starts: not one an outgoing connection may take
    meanwhile (``free_port_for_a_server``)."""
    return free_port_for_a_server()


def wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str, log: Path, timeout: float
) -> None:
    """Until ``ready()``; a process that exits or a timeout fails with the end of its log."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def http_ok(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    return ready


def stop(process: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    """The process's whole group (a worker's flow-run processes go with it), then SIGKILL
    if it lingers."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGCONT)  # a frozen (SIGSTOPped) process must hear the signal
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def spawn(argv: list[str], env: dict[str, str], cwd: Path, log: Path, stack: ExitStack) -> subprocess.Popen[bytes]:
    """``argv`` in its own session, its output in ``log``, stopped with ``stack``."""
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    stack.callback(stop, process)
    return process


DATABASE = "prefect.db"
"""Where a server keeps its SQLite database in its PREFECT_HOME, by Prefect's default."""


def migrated_home(home: Path, *, make: bool = True) -> bool:
    """A copy of a migrated SQLite database in ``home``, unless it holds one: a server's first
    start on a fresh home runs every migration, 6.7 of its 11.9 CPU-seconds on this machine.
    For the servers a test starts for something else than a new home (the session's, one to
    restart, a second one); a new user's first run, the embedded default's, stays fresh.
    With ``make=False``, only when the copy's source exists already (``database_template``).
    Whether ``home`` now holds a database."""
    target = home / DATABASE
    if target.exists():
        return True
    template = database_template() if make else _template_path()
    if not template.exists():
        return False
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, target)
    return True


def database_template() -> Path:
    """One migrated database per Prefect release, made once per machine by ``prefect server
    database upgrade`` under a lock (xdist workers start at once)."""
    template = _template_path()
    with open(template.parent / "migrating.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            _migrate_into(template)
    return template


def _template_path() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nexusflow" / "tests"
    cache.mkdir(parents=True, exist_ok=True)
    return cache / f"prefect-{version('prefect')}.db"


def _migrate_into(template: Path) -> None:
    """Prefect's own migrations, on a database of a home of their own, then moved into place."""
    with tempfile.TemporaryDirectory(prefix="migrating-", dir=template.parent) as home:
        env = {name: value for name, value in os.environ.items() if not name.startswith("PREFECT_")}
        env.update({"PREFECT_HOME": home, "DO_NOT_TRACK": "1"})
        argv = [sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"prefect server database upgrade failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        os.replace(Path(home) / DATABASE, template)


def postgres(stack: ExitStack) -> tuple[str, subprocess.Popen[bytes]]:
    """A throwaway cluster in a temp dir of its own (removed with ``stack``): its asyncpg URL
    and its process (``runuser``'s, as root), which the cluster's processes descend from.
    PostgreSQL refuses to run as root, so as root it runs as Debian's ``postgres`` user."""
    binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not binaries:
        raise RuntimeError("no PostgreSQL server: run .ci/install-topology (or apt-get install postgresql)")
    bin_dir = binaries[-1].parent
    root = Path(tempfile.mkdtemp(prefix="nexusflow-pg-"))
    stack.callback(shutil.rmtree, root, True)
    data = root / "pg"
    data.mkdir()
    as_postgres: list[str] = []
    if os.geteuid() == 0:
        as_postgres = ["runuser", "-u", "postgres", "--"]
        shutil.chown(data, "postgres")
        root.chmod(0o755)
    subprocess.run(
        [*as_postgres, str(bin_dir / "initdb"), "-D", str(data / "data"), "-U", "postgres", "-A", "trust", "--no-sync"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    log = root / "postgres.log"
    settings = [
        "listen_addresses=127.0.0.1",
        "max_connections=200",
        "fsync=off",
        "synchronous_commit=off",
        "full_page_writes=off",
    ]
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [*as_postgres, str(bin_dir / "postgres"), "-D", str(data / "data"), "-p", str(port), "-k", str(data)]
            + [arg for setting in settings for arg in ("-c", setting)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    stack.callback(stop, server, signal.SIGINT)  # a fast shutdown
    ready = [str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]
    wait_until(lambda: subprocess.run(ready).returncode == 0, server, "PostgreSQL", log, 60)
    subprocess.run(
        [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "prefect"], check=True
    )
    return f"postgresql+asyncpg://postgres@127.0.0.1:{port}/prefect", server


def start_prefect_server(
    port: int, env: dict[str, str], cwd: Path, log: Path, stack: ExitStack
) -> subprocess.Popen[bytes]:
    """``prefect server start`` on ``port`` of 127.0.0.1 with ``env`` (its PREFECT_HOME and
    database), not yet ready: ``wait_for_prefect_server`` waits, so a caller can start other
    servers meanwhile."""
    argv = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    return spawn(argv, untraced(env), cwd, log, stack)


def untraced(env: dict[str, str]) -> dict[str, str]:
    """``env`` without coverage's subprocess measurement (``[tool.coverage.run] patch``): a
    Prefect server runs none of nexusflow's code, and tracing every call in it is what the
    fast tier's coverage cost (benchmarks/README.md)."""
    return {name: value for name, value in env.items() if not name.startswith("COVERAGE_PROCESS_")}


def wait_for_prefect_server(api_url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    wait_until(http_ok(f"{api_url}/health"), process, "the Prefect server", log, timeout)
