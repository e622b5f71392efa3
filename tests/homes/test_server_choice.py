"""Which Prefect server a process uses, one rule for Python programs and for the command:
``PREFECT_API_URL`` when set; else the server that ``nexusflow server`` runs for this
``PREFECT_HOME``; else the embedded one. Two homes, each with its own ``nexusflow server``
(the real command), and homes without one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from nexusflow import RunResult

from helpers.homes import loud, new_user_environment, nexusflow_server, noise, served
from helpers.servers import migrated_home

pytestmark = pytest.mark.xdist_group("server-choice")  # the two homes' servers start once, on one worker

PROGRAM = """
from nexusflow import create_in_process_client

result = create_in_process_client(lambda request: "hi").run_sync("hello")
print(result.model_dump_json())
"""


@dataclass
class Home:
    path: Path
    env: dict[str, str]
    server: subprocess.Popen[str]
    url: str


def python(env: dict[str, str], timeout: float = 240) -> tuple[RunResult, str]:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return RunResult.model_validate_json(done.stdout.strip().splitlines()[-1]), done.stderr


def recorded_on(url: str, result: RunResult) -> bool:
    return httpx.get(f"{url}/flow_runs/{result.flow_run_id}", timeout=10).status_code == 200


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Home]]:
    with ExitStack() as stack:
        started = {}
        for name in ("a", "b"):
            path = tmp_path_factory.mktemp(f"home-{name}")
            env = new_user_environment(path)
            if name == "b":
                migrated_home(path)  # a's is a new home's first start; b's would only repeat its migrations
            started[name] = (path, env, stack.enter_context(nexusflow_server(env, path.parent / f"{name}.log")))
        yield {name: Home(path, env, server, served(server)) for name, (path, env, server) in started.items()}


def test_a_python_program_uses_the_server_of_its_own_home(homes):
    a, b = homes["a"], homes["b"]
    started = time.monotonic()
    result, stderr = python(a.env)
    assert result.status == "completed", result.error
    assert recorded_on(a.url, result) and not recorded_on(b.url, result)
    assert f"using the Prefect server that `nexusflow server` runs for {a.path}: {a.url}" in stderr
    assert "Starting temporary server" not in stderr
    assert noise(stderr) == [], loud(stderr)
    print(f"a run against its home's server: {time.monotonic() - started:.1f}s")


def test_the_command_uses_the_server_of_its_own_home(homes):
    a, b = homes["a"], homes["b"]
    done = subprocess.run([sys.executable, "-m", "nexusflow", "demo"], capture_output=True, text=True, env=b.env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"using the Prefect server that `nexusflow server` runs for {b.path}: {b.url}" in done.stderr
    assert f"See it in the Prefect UI: {b.url.removesuffix('/api')}/runs/flow-run/" in done.stderr
    run_id = done.stderr.split("/runs/flow-run/")[1].split()[0]
    assert httpx.get(f"{b.url}/flow_runs/{run_id}").status_code == 200
    assert httpx.get(f"{a.url}/flow_runs/{run_id}").status_code == 404
    assert noise(done.stderr) == [], loud(done.stderr)


def test_prefect_api_url_wins_over_the_homes_server(homes):
    a, b = homes["a"], homes["b"]
    result, stderr = python({**a.env, "PREFECT_API_URL": b.url})
    assert recorded_on(b.url, result) and not recorded_on(a.url, result)
    assert f"using the Prefect server at {b.url} (PREFECT_API_URL)" in stderr


def test_a_second_server_for_a_home_is_refused_in_one_line(homes):
    a = homes["a"]
    done = subprocess.run(
        [sys.executable, "-m", "nexusflow", "server", "--port", "1"], capture_output=True, text=True, env=a.env
    )
    assert done.returncode == 2
    assert done.stderr == f"nexusflow: a server for {a.path} is already running at {a.url}\n"


def test_server_env_prints_the_running_servers_export_line_or_says_none_runs(homes, tmp_path):
    """For ``eval "$(nexusflow server --env)"`` (prefect.yaml's header, docs/operating.md):
    the home's server, whatever ``PREFECT_API_URL`` says; none running is one line, exit 1,
    and nothing for ``eval`` to run."""
    a, b = homes["a"], homes["b"]
    command = [sys.executable, "-m", "nexusflow", "server", "--env"]
    done = subprocess.run(command, capture_output=True, text=True, env={**a.env, "PREFECT_API_URL": b.url})
    assert (done.returncode, done.stdout, done.stderr) == (0, f"export PREFECT_API_URL={a.url}\n", "")
    none = new_user_environment(tmp_path)
    done = subprocess.run(command, capture_output=True, text=True, env=none)
    assert (done.returncode, done.stdout) == (1, "")
    assert (
        done.stderr == f"nexusflow: error: no nexusflow server runs for {tmp_path}; start one with `nexusflow server`\n"
    )


# Prefect picks the embedded server's port among 1,000 at random and takes any server that
# answers there for its own; two processes started together (two jobs on one machine, two
# tests) shared one server, which then went away with its process: a run failed with a 404
# for the flow run it had just created. nexusflow gives it a port of its own.
COLLIDING = '''
import http.server, threading
from prefect.server.api.server import SubprocessASGIServer


class Foreign(http.server.BaseHTTPRequestHandler):
    """Another process's server: healthy, but it knows none of this process's runs."""

    def do_GET(self):
        self.send_response(200 if self.path.endswith("/health") else 404)
        self.end_headers()
        self.wfile.write(b"true")

    do_POST = do_PATCH = do_PUT = do_DELETE = do_GET

    def log_message(self, *args):
        pass


foreign = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Foreign)
threading.Thread(target=foreign.serve_forever, daemon=True).start()
# A race with another process, as Prefect's port choice meets it: the port it picks looked
# free a moment ago, and by the time it checks its server's health another one answers there.
SubprocessASGIServer._port_range = range(foreign.server_port, foreign.server_port + 1)
SubprocessASGIServer.is_port_available = staticmethod(lambda port: True)
'''


def test_without_a_live_server_of_its_own_a_home_runs_embedded(homes, tmp_path):
    """Home c finds another home's server on its default address (``PREFECT_SERVER_API_PORT``
    is a's port: the command used to take any server there), and meets Prefect's own port
    race (``COLLIDING``); home b's server was SIGKILLed and left its record. Both run on an
    embedded server of their own, quietly, side by side."""
    a, b = homes["a"], homes["b"]
    os.killpg(b.server.pid, signal.SIGKILL)
    b.server.wait()
    assert (b.path / "nexusflow-server.json").exists(), "a killed server leaves its record"
    c = new_user_environment(tmp_path)
    c["PREFECT_SERVER_API_PORT"] = a.url.rsplit(":", 1)[1].split("/")[0]
    programs = [
        subprocess.Popen(
            [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for program, env in ((COLLIDING + PROGRAM, c), (PROGRAM, b.env))
    ]
    for process in programs:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        result = RunResult.model_validate_json(out.strip().splitlines()[-1])
        assert result.status == "completed" and result.text == "hi", result.error
        assert "using an embedded Prefect server" in err and "Starting temporary server" in err
        assert not recorded_on(a.url, result)
        assert noise(err) == [], loud(err)


def test_a_stopped_server_takes_its_record_with_it(homes):
    a = homes["a"]
    a.server.terminate()
    assert a.server.wait(timeout=60) == 0
    assert not (a.path / "nexusflow-server.json").exists()
