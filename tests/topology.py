"""A multi-machine Prefect topology on loopback, started once per test session and shared:
a PostgreSQL cluster, a Prefect server on it, an S3-compatible server (moto) whose bucket is
the saved ``S3Bucket`` block every run stores its results in, a process work pool, and two
``prefect worker start`` processes, machines A and B, each with its own HOME, PREFECT_HOME,
TMPDIR and working directory: they share nothing but the server and the bucket.

Separate from the SQLite server of conftest.py: everything here reaches the topology through
explicit environments (``Topology.env``) or ``Topology.api()``, never the test's own env.
Every process is started in its own process group and stopped by the fixture.
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
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

POOL = "topology"
DEPLOYMENT = "agent-job/topology"
RESULTS = "results"
"""The bucket behind the S3Bucket block (``s3-bucket/nexusflow-results``)."""
SIDE_EFFECTS = "side-effects"
"""The bucket of the tools' own log (tests/helpers/topology_tools.py), not nexusflow state."""
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def _stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """The whole process group: a worker's flow-run processes go with it."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGCONT)  # a frozen machine must hear the signal
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@dataclass
class Machine:
    """One worker machine: its own HOME (with PREFECT_HOME and the default local result
    path inside), TMPDIR and working directory."""

    name: str
    root: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    @property
    def local_storage(self) -> Path:
        return Path(self.env["PREFECT_LOCAL_STORAGE_PATH"])

    def freeze(self) -> None:
        """The machine stops taking work (SIGSTOP of its worker): the way a test pins a run
        to the other machine while both poll the same pool."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)


@dataclass
class Topology:
    root: Path
    api_url: str
    s3_url: str
    env: dict[str, str]
    """What a third machine (an operator's shell) needs: the API and the storage settings."""
    machines: dict[str, Machine] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def api(self) -> AbstractContextManager[Any]:
        """Prefect settings pointing this process at the topology's server."""
        from prefect.settings import PREFECT_API_URL, temporary_settings

        return temporary_settings({PREFECT_API_URL: self.api_url})

    def s3(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.s3_url,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


def _postgres(root: Path, stack: ExitStack) -> str:
    """A throwaway cluster: initdb in a temp dir, a free port, its socket in the temp dir.
    PostgreSQL refuses to run as root, so as root it runs as Debian's ``postgres`` user."""
    binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not binaries:
        raise RuntimeError("no PostgreSQL server: run .ci/install-topology")
    bin_dir = binaries[-1].parent
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
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [
                *as_postgres,
                str(bin_dir / "postgres"),
                "-D",
                str(data / "data"),
                "-p",
                str(port),
                "-k",
                str(data),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    stack.callback(_stop, server, signal.SIGINT)  # a fast shutdown
    ready = [str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]
    _wait_until(lambda: subprocess.run(ready).returncode == 0, server, "PostgreSQL", log, 60)
    subprocess.run(
        [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "prefect"], check=True
    )
    return f"postgresql+asyncpg://postgres@127.0.0.1:{port}/prefect"


def _spawn(argv: list[str], env: dict[str, str], cwd: Path, log: Path, stack: ExitStack) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    stack.callback(_stop, process)
    return process


def _base_env(api_url: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PREFECT_", "AWS_"))}
    env.update(
        {
            "PREFECT_API_URL": api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_LOGGING_LEVEL": "INFO",
            "PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK": "s3-bucket/nexusflow-results",
            "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
        }
    )
    return env


def _own_environment(env: dict[str, str], root: Path) -> dict[str, str]:
    """A machine's private folders, created; its default local storage among them, so a
    stray local write would land where the test looks for it."""
    home = root / "home"
    for folder in (home, root / "work", root / "tmp"):
        folder.mkdir(parents=True)
    return {
        **env,
        "HOME": str(home),
        "PREFECT_HOME": str(home / ".prefect"),
        "PREFECT_LOCAL_STORAGE_PATH": str(home / ".prefect" / "storage"),
        "TMPDIR": str(root / "tmp"),
    }


async def _configure(topology: Topology) -> None:
    """The bucket block, the pool and the deployment, saved on the topology's server."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.utilities.callables import parameter_schema
    from prefect_aws import AwsClientParameters, AwsCredentials, S3Bucket

    from nexusflow.flows.job import agent_job

    credentials = AwsCredentials(
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        aws_client_parameters=AwsClientParameters(endpoint_url=topology.s3_url),
    )
    await credentials.asave("nexusflow-results", overwrite=True)
    await S3Bucket(bucket_name=RESULTS, credentials=credentials).asave("nexusflow-results", overwrite=True)
    async with get_client() as client:
        await client.create_work_pool(WorkPoolCreate(name=POOL, type="process"), overwrite=True)
        flow_id = await client.create_flow(agent_job)
        await client.create_deployment(
            flow_id=flow_id,
            name=DEPLOYMENT.split("/")[1],
            entrypoint="nexusflow.flows.job:agent_job",
            work_pool_name=POOL,
            # "." is each worker's own working directory (resolved by the worker itself).
            job_variables={"working_dir": "."},
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {"directory": "."}}],
            parameter_openapi_schema=parameter_schema(agent_job).model_dump_for_openapi(),
        )


@pytest.fixture(scope="session", name="topology")
def topology_fixture() -> Iterator[Topology]:
    """Import it into a test module (``from topology import topology_fixture``) to use it."""
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="nexusflow-topology-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        database = _postgres(root, stack)
        timings = {"postgres": time.monotonic() - started}

        api_url = f"http://127.0.0.1:{free_port()}/api"
        env = _base_env(api_url)
        server_env = _own_environment(env, root / "server")
        server_env["PREFECT_API_DATABASE_CONNECTION_URL"] = database
        port = api_url.split(":")[2].split("/")[0]
        server = _spawn(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", port],
            server_env,
            root / "server" / "work",
            root / "server.log",
            stack,
        )

        s3_port = free_port()
        s3_url = f"http://127.0.0.1:{s3_port}"
        (root / "s3").mkdir()
        s3 = _spawn(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
            env,
            root / "s3",
            root / "s3.log",
            stack,
        )
        _wait_until(_http_ok(f"{s3_url}/moto-api/"), s3, "moto's S3 server", root / "s3.log", 60)
        env.update(CREDENTIALS)
        env["AWS_ENDPOINT_URL"] = s3_url
        topology = Topology(root=root, api_url=api_url, s3_url=s3_url, env=env, timings=timings)
        for bucket in (RESULTS, SIDE_EFFECTS):
            topology.s3().create_bucket(Bucket=bucket)

        _wait_until(_http_ok(f"{api_url}/health"), server, "the Prefect server", root / "server.log", 180)
        timings["server"] = time.monotonic() - started
        with topology.api():
            anyio.run(_configure, topology)

        for name in ("a", "b"):
            machine = Machine(
                name, root / name, _own_environment({**env, "PREFECT_WORKER_QUERY_SECONDS": "1"}, root / name)
            )
            machine.process = _spawn(
                [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--name", f"worker-{name}"],
                machine.env,
                machine.workdir,
                root / f"worker-{name}.log",
                stack,
            )
            topology.machines[name] = machine
        timings["total"] = time.monotonic() - started
        print(
            f"\ntopology started in {timings['total']:.1f}s ({', '.join(f'{k} {v:.1f}s' for k, v in timings.items())})"
        )
        yield topology
