"""Servers for the benchmarks, on loopback, in temp homes: a throwaway PostgreSQL cluster and
a ``prefect server start`` on SQLite or on that cluster. The same approach as the tests'
topology (initdb in a temp dir, ``runuser -u postgres`` as root, an asyncpg URL), kept here
because benchmarks do not import from tests/.

Every process is started in its own session (``start_new_session``), so stopping it stops
its children; its CPU is the sum over its process tree (``tree_cpu``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of a process and its descendants (a server's workers,
    PostgreSQL's backends under ``runuser``), the ended ones that were waited for included."""
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the ")": state ppid ... utime stime cutime cstime (12th to 15th)
        stats[int(entry.name)] = (int(fields[1]), sum(int(value) for value in fields[11:15]))
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0))[1]
        todo.extend(children.get(pid, []))
    return total / TICKS


def _wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str, log: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def _http_ok(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    return ready


def stop(process: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    """The process's whole group, then SIGKILL if it lingers."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def base_env() -> dict[str, str]:
    """This environment without Prefect's settings, quiet and offline."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env.update({"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    return env


def postgres(stack: ExitStack) -> tuple[str, subprocess.Popen[bytes]]:
    """A throwaway cluster in a temp dir of its own (removed with ``stack``): its asyncpg URL
    and its process (``runuser``'s, as root), which the cluster's processes descend from."""
    binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not binaries:
        raise RuntimeError("no PostgreSQL server: apt-get install postgresql")
    bin_dir = binaries[-1].parent
    root = Path(tempfile.mkdtemp(prefix="nexusflow-bench-pg-"))
    stack.callback(shutil.rmtree, root, True)
    data = root / "pg"
    data.mkdir()
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: Debian's postgres user runs it
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
    settings = ["listen_addresses=127.0.0.1", "max_connections=200", "fsync=off", "synchronous_commit=off"]
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
    _wait_until(lambda: subprocess.run(ready).returncode == 0, server, "PostgreSQL", log, 60)
    subprocess.run(
        [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "prefect"], check=True
    )
    return f"postgresql+asyncpg://postgres@127.0.0.1:{port}/prefect", server


@dataclass
class PrefectServer:
    api_url: str
    process: subprocess.Popen[bytes]
    database: subprocess.Popen[bytes] | None
    """Its PostgreSQL cluster; None on SQLite."""
    started_in: float
    log: Path

    def problem(self) -> str | None:
        """Why the server (or its database) is gone; None while both run."""
        for what, process in (("the Prefect server", self.process), ("PostgreSQL", self.database)):
            if process is not None and process.poll() is not None:
                return f"{what} exited ({process.returncode}):\n{self.log.read_text(errors='replace')[-2000:]}"
        return None

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far: the Prefect server's, its database's (0 on SQLite: in-process)."""
        database = tree_cpu(self.database.pid) if self.database is not None else 0.0
        return tree_cpu(self.process.pid), database


def prefect_server(backend: str, root: Path, stack: ExitStack) -> PrefectServer:
    """``prefect server start`` on a free loopback port with its own PREFECT_HOME in ``root``,
    on ``sqlite`` (a file in ``root``) or ``postgres`` (a cluster started here)."""
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    cluster = None
    if backend == "postgres":
        database, cluster = postgres(stack)
    elif backend == "sqlite":
        database = f"sqlite+aiosqlite:///{root / 'prefect.db'}"
    else:
        raise ValueError(f"unknown backend {backend!r}")
    port = free_port()
    env = base_env()
    env.update(
        {
            "HOME": str(root),
            "PREFECT_HOME": str(root / ".prefect"),
            "PREFECT_API_DATABASE_CONNECTION_URL": database,
            "PREFECT_LOGGING_LEVEL": "WARNING",
        }
    )
    log = root / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    stack.callback(stop, server)
    api_url = f"http://127.0.0.1:{port}/api"
    _wait_until(_http_ok(f"{api_url}/health"), server, f"the Prefect server on {backend}", log, 240)
    return PrefectServer(api_url, server, cluster, time.monotonic() - started, log)
