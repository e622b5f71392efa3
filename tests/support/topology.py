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
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from helpers.servers import (
    free_port,
    http_ok,
    postgres,
    spawn,
    start_prefect_server,
    wait_for_prefect_server,
    wait_until,
)

POOL = "topology"
DEPLOYMENT = "agent-job/topology"
RESULTS = "results"
"""The bucket behind the S3Bucket block (``s3-bucket/nexusflow-results``)."""
SIDE_EFFECTS = "side-effects"
"""The bucket of the tools' own log (tests/support/helpers/topology_tools.py), not nexusflow state."""
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


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

    from nexusflow.job import agent_job

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
            entrypoint="nexusflow.job:agent_job",
            work_pool_name=POOL,
            # "." is each worker's own working directory (resolved by the worker itself).
            job_variables={"working_dir": "."},
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {"directory": "."}}],
            parameter_openapi_schema=parameter_schema(agent_job).model_dump_for_openapi(),
        )


@pytest.fixture(scope="module", name="topology")
def topology_fixture() -> Iterator[Topology]:
    """Import it into a test module (``from topology import topology_fixture``) to use it. It
    stops with the module's last test: kept for the session, its server and two workers,
    polling every second, idled through the rest of the tier (benchmarks/README.md)."""
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="nexusflow-topology-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        database, _ = postgres(stack)
        timings = {"postgres": time.monotonic() - started}

        port = free_port()
        api_url = f"http://127.0.0.1:{port}/api"
        env = _base_env(api_url)
        server_env = _own_environment(env, root / "server")
        server_env["PREFECT_API_DATABASE_CONNECTION_URL"] = database
        server = start_prefect_server(port, server_env, root / "server" / "work", root / "server.log", stack)

        s3_port = free_port()
        s3_url = f"http://127.0.0.1:{s3_port}"
        (root / "s3").mkdir()
        s3 = spawn(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
            env,
            root / "s3",
            root / "s3.log",
            stack,
        )
        wait_until(http_ok(f"{s3_url}/moto-api/"), s3, "moto's S3 server", root / "s3.log", 60)
        env.update(CREDENTIALS)
        env["AWS_ENDPOINT_URL"] = s3_url
        topology = Topology(root=root, api_url=api_url, s3_url=s3_url, env=env, timings=timings)
        for bucket in (RESULTS, SIDE_EFFECTS):
            topology.s3().create_bucket(Bucket=bucket)

        wait_for_prefect_server(api_url, server, root / "server.log")
        timings["server"] = time.monotonic() - started
        with topology.api():
            anyio.run(_configure, topology)

        for name in ("a", "b"):
            machine = Machine(
                name, root / name, _own_environment({**env, "PREFECT_WORKER_QUERY_SECONDS": "1"}, root / name)
            )
            machine.process = spawn(
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
