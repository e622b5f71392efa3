"""Every fault ends in an honest Prefect state (issue 42), on servers the tests start of their
own: the embedded default, where a killed run is crashed by the take-over, Ctrl-C never hangs,
and a run killed at any step boundary leaves no process and reads ``Crashed``; and a home's
``nexusflow server``, whose watch crashes killed runs nobody looks at. The same faults on the
session's server: tests/server/run/test_honest_states.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.held_runs import CRASHED_BY_TAKE_OVER, SLOW_TOOL, hold, kill, rerun
from helpers.processes import running_with
from paths import HELPERS

pytestmark = pytest.mark.timeout(600)

STATES = HELPERS / "run_states.py"


def _embedded(home: Path) -> dict[str, str]:
    env = {**os.environ, "PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_LOCAL_STORAGE_PATH", None)
    return env


@pytest.mark.xdist_group("heavy")  # starts embedded servers of its own, one after another
def test_a_killed_run_is_crashed_by_the_take_over_on_the_embedded_default(tmp_path, session_id):
    home = tmp_path / "home"
    env = _embedded(home)
    gate = tmp_path / "gate"
    holder = hold(session_id, tmp_path / "held", gate, env)
    kill(holder)
    gate.touch()
    again = rerun(session_id, tmp_path / "again", env)
    assert again.returncode == 0 and '"completed"' in again.stdout.splitlines()[-1], again.stderr[-3000:]
    read = subprocess.run(
        [sys.executable, str(STATES), session_id], capture_output=True, text=True, timeout=300, env=env
    )
    assert read.returncode == 0, read.stderr[-3000:]
    first, second = json.loads(read.stdout)
    assert second["state"] == "COMPLETED"
    assert first["state"] == "CRASHED", first
    match = CRASHED_BY_TAKE_OVER.match(first["message"] or "")
    assert match and match["s"] == session_id, first["message"]
    # Its in-flight task run, when its Running event reached the server before the kill:
    assert first["tasks"].get("tool-0-charge", "CRASHED") == "CRASHED", first["tasks"]
    assert "RUNNING" not in first["tasks"].values(), first["tasks"]
    _no_process_of(home)


def _no_process_of(home: Path) -> None:
    mark = f"PREFECT_HOME={home}"
    deadline = time.monotonic() + 30
    while (left := running_with(mark)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left


@pytest.mark.xdist_group("heavy")  # starts embedded servers of its own, one after another
def test_ctrl_c_on_the_embedded_default_never_hangs_and_leaves_no_server(tmp_path, session_id):
    """Three times: SIGINT to the command's process group (its embedded server's too, on
    d56091b) while its tool runs; each time the command exits 130 and no process of its home
    remains, and it said how to go on without an ERROR. On d56091b one try in three hung (the
    server went first), and each printed four ERROR lines."""
    (tmp_path / "slow_tools.py").write_text(SLOW_TOOL)
    home = tmp_path / "home"
    env = _embedded(home)
    argv = ["nexusflow", "run", 'call wait {"seconds": 600}', "--tools", "slow_tools.py:wait"]
    for attempt in range(3):
        log = tmp_path / f"err-{attempt}"
        with log.open("w") as err:
            run = subprocess.Popen(
                [*argv, "--session", f"{session_id}-{attempt}"],
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                cwd=tmp_path,
                env={**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"},
            )
        try:
            deadline = time.monotonic() + 180
            while "Task run 'tool-0-wait'" not in log.read_text():
                assert run.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "the run never reached its tool"
                time.sleep(0.2)
            os.killpg(run.pid, signal.SIGINT)
            assert run.wait(timeout=90) == 130, log.read_text()[-3000:]
            err = log.read_text()
            assert "nexusflow: interrupted; go on with: nexusflow run --session " in err, err[-3000:]
            assert "Traceback" not in err and "| ERROR" not in err, err[-3000:]
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        _no_process_of(home)


STEP_RECORDS = 7
"""``durable_run.py``'s run stores seven steps: three turns and four tool calls."""


@pytest.mark.xdist_group("heavy")  # starts embedded servers of its own, one after another
@pytest.mark.parametrize("boundary", range(1, STEP_RECORDS + 1))
def test_a_run_killed_at_each_step_boundary_on_the_embedded_default_leaves_nothing_and_reads_crashed(
    tmp_path, session_id, boundary
):
    """SIGKILL of the run's own process (not its group) right after its ``boundary``-th step
    is stored: within a bounded time no process of its home remains (its embedded server, its
    CLI-less tools), the rerun completes, and the killed flow run reads ``Crashed``."""
    home = tmp_path / "home"
    env = _embedded(home)
    logs = tmp_path / "killed"
    logs.mkdir()
    killed = subprocess.run(
        [sys.executable, str(HELPERS / "durable_run.py"), session_id, str(logs), "--kill-after", str(boundary)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    _no_process_of(home)
    again = rerun(session_id, tmp_path / "again", env)
    assert again.returncode == 0 and '"completed"' in again.stdout.splitlines()[-1], again.stderr[-3000:]
    read = subprocess.run(
        [sys.executable, str(STATES), session_id], capture_output=True, text=True, timeout=300, env=env
    )
    assert read.returncode == 0, read.stderr[-3000:]
    first, second = json.loads(read.stdout)
    assert second["state"] == "COMPLETED", second
    assert first["state"] == "CRASHED", first
    assert "RUNNING" not in first["tasks"].values(), first["tasks"]
    _no_process_of(home)


def _server_runs(url: str, session_id: str) -> list[dict[str, Any]]:
    """The session's flow runs on the server at ``url``, with their task runs' states."""
    import httpx

    name = {"flow_runs": {"name": {"any_": [f"agent-{session_id}"]}}}
    found = []
    for run in httpx.post(f"{url}/flow_runs/filter", json=name, timeout=30).json():
        tasks = httpx.post(
            f"{url}/task_runs/filter", json={"flow_runs": {"id": {"any_": [run["id"]]}}}, timeout=30
        ).json()
        found.append({**run["state"], "tasks": {task["name"]: task["state"]["type"] for task in tasks}})
    return found


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is not installed")
def test_nexusflow_servers_watch_crashes_a_killed_run_nobody_looks_at(tmp_path, session_id):
    """Nothing runs after the kills, no take-over and no ``nexusflow sessions``: the watch of
    the home's ``nexusflow server`` finds each killed run dead, the one whose process ran here
    by its process, the one that looks like another machine's (a PID namespace of its own)
    once its heartbeat stood still, marks each ``Crashed`` with its in-flight task run, and
    says so in one line on the server's log. A run that lives is left alone."""
    from helpers.homes import loud, nexusflow_server, noise, served
    from helpers.servers import migrated_home

    home = tmp_path / "home"
    migrated_home(home)
    env = _embedded(home)
    here, elsewhere, alive = session_id, f"{session_id}-elsewhere", f"{session_id}-alive"
    with nexusflow_server(env, tmp_path / "server.log") as server:
        url = served(server)
        holders = {
            here: hold(here, tmp_path / "here", tmp_path / "gate", env),
            elsewhere: hold(elsewhere, tmp_path / "elsewhere", tmp_path / "gate", env, ("unshare", "--pid", "--fork")),
            alive: hold(alive, tmp_path / "alive", tmp_path / "gate", env),
        }
        kill(holders[here])
        kill(holders[elsewhere])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(
            runs and runs[0]["type"] == "CRASHED" and "RUNNING" not in runs[0]["tasks"].values()
            for runs in (_server_runs(url, here), _server_runs(url, elsewhere))
        ):
            time.sleep(0.5)
        (died,), (stopped,), (living,) = (_server_runs(url, s) for s in (here, elsewhere, alive))
        (tmp_path / "gate").touch()
        finished = holders[alive].communicate(timeout=300)
        server.terminate()
        server.wait(timeout=60)
    watch = "found by nexusflow server's watch"
    assert died["type"] == "CRASHED", died
    assert re.match(
        rf'^nexusflow: session "{re.escape(here)}": its process \d+ on this machine died; {watch}$', died["message"]
    )
    assert died["tasks"]["tool-0-charge"] == "CRASHED", died
    assert stopped["type"] == "CRASHED", stopped
    assert re.match(
        rf'^nexusflow: session "{re.escape(elsewhere)}": its run has not beaten for \d+s; {watch}$', stopped["message"]
    )
    assert stopped["tasks"]["tool-0-charge"] == "CRASHED", stopped
    assert living["type"] == "RUNNING", living
    assert holders[alive].returncode == 0, finished[1][-3000:]
    log = (tmp_path / "server.log").read_text()
    told = [line for line in log.splitlines() if line.startswith("nexusflow: session")]
    assert sorted(told) == sorted(f"nexusflow: session {s}: its run died; marked Crashed" for s in (here, elsewhere))
    assert noise(log) == [], loud(log)
