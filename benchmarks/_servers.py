"""Servers for the benchmarks, on loopback, in temp homes: a ``prefect server start`` on
SQLite or on a throwaway PostgreSQL cluster, started by the same code as the tests' servers
(tests/support/helpers/servers.py), and the CPU the servers spend.

Every process is started in its own session (``start_new_session``), so stopping it stops
its children; its CPU is the sum over its process tree (``tree_cpu``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from helpers.servers import (
    free_port,
    http_ok,
    postgres,
    spawn,
    start_prefect_server,
    stop,
    wait_for_prefect_server,
    wait_until,
)

__all__ = [
    "PrefectServer",
    "S3Topology",
    "base_env",
    "prefect_server",
    "s3_topology",
    "stop",
    "this_process_on_a_new_server",
    "tree_cpu",
]

TICKS = os.sysconf("SC_CLK_TCK")


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


def base_env() -> dict[str, str]:
    """This environment without Prefect's settings, quiet and offline."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env.update({"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    return env


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

    async def quiet(self, longest: float) -> float:
        """Wait until the server's CPU stays under 10 % for half a second (it has worked off
        what it was recording; its idle services tick above 3 %), at most ``longest``
        seconds; the seconds waited, in half-second steps."""
        import anyio

        waited = 0.0
        while waited < longest:
            before = self.cpu()[0]
            await anyio.sleep(0.5)
            waited += 0.5
            if self.cpu()[0] - before < 0.05:
                break
        return waited


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
    server = start_prefect_server(port, env, root, log, stack)
    api_url = f"http://127.0.0.1:{port}/api"
    wait_for_prefect_server(api_url, server, log, timeout=240)
    return PrefectServer(api_url, server, cluster, time.monotonic() - started, log)


def this_process_on_a_new_server(prefix: str, stack: ExitStack, backend: str = "sqlite") -> PrefectServer:
    """A ``prefect server start`` on ``backend`` (``prefect_server``) in a temp dir (removed
    with ``stack``), and this process pointed at it with a Prefect home and result storage
    of its own."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    stack.callback(shutil.rmtree, root, True)
    server = prefect_server(backend, root / "server", stack)
    os.environ.update(
        {
            "PREFECT_API_URL": server.api_url,
            "PREFECT_HOME": str(root / "client"),
            "PREFECT_LOCAL_STORAGE_PATH": str(root / "storage"),
            "DO_NOT_TRACK": "1",
        }
    )
    return server


S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
S3_BLOCK = "s3-bucket/nexusflow-results"


@dataclass
class S3Topology:
    """tests/support/topology.py's servers without its work pool: a Prefect server on PostgreSQL and
    moto's S3 server, whose bucket ``results`` is the saved ``S3Bucket`` block the runs
    store their results in (``env``)."""

    server: PrefectServer
    s3_url: str
    env: dict[str, str]
    """What a machine needs to reach both: the API, the storage block, the S3 endpoint."""


def s3_topology(root: Path, stack: ExitStack) -> S3Topology:
    """The PostgreSQL + S3 topology on loopback, its files in ``root``, stopped with ``stack``."""
    import anyio
    import boto3

    server = prefect_server("postgres", root / "server", stack)
    port = free_port()
    s3_url = f"http://127.0.0.1:{port}"
    (root / "s3").mkdir(parents=True)
    s3 = spawn(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        base_env(),
        root / "s3",
        root / "s3.log",
        stack,
    )
    wait_until(http_ok(f"{s3_url}/moto-api/"), s3, "moto's S3 server", root / "s3.log", 60)
    credentials = {key.lower(): value for key, value in S3_CREDENTIALS.items() if key != "AWS_DEFAULT_REGION"}
    boto3.client("s3", endpoint_url=s3_url, region_name="us-east-1", **credentials).create_bucket(Bucket="results")
    env = base_env() | S3_CREDENTIALS
    env.update(
        {
            "PREFECT_API_URL": server.api_url,
            "AWS_ENDPOINT_URL": s3_url,
            "PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK": S3_BLOCK,
            "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
        }
    )

    async def save_block() -> None:
        from prefect.settings import PREFECT_API_URL, temporary_settings
        from prefect_aws import AwsClientParameters, AwsCredentials, S3Bucket

        saved = AwsCredentials(
            aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=S3_CREDENTIALS["AWS_DEFAULT_REGION"],
            aws_client_parameters=AwsClientParameters(endpoint_url=s3_url),
        )
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            await saved.asave("nexusflow-results", overwrite=True)
            await S3Bucket(bucket_name="results", credentials=saved).asave("nexusflow-results", overwrite=True)

    anyio.run(save_block)
    return S3Topology(server, s3_url, env)
