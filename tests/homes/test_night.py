"""A night, end to end (issue 42's must-show), with real parts only: ``nexusflow server`` as a
user starts it in a fresh home, scheduled deployments of ``agent_job`` whose runs a real process
worker picks up, nexusflow's alerts sending through a webhook block to an HTTP receiver on
127.0.0.1, and a claude CLI on PATH (the fake one, scripted run by run).

In turn: a healthy run tells nothing; a run that asks for an approval tells the answer command,
which answers it as written; a CLI whose login is gone fails its run with ``AuthRequired``; a
run killed with its worker (kill -9 of the worker's process group and of its run's, while the
CLI of its turn thinks) reads Crashed (``nexusflow server``'s watch marks it), and once the
next run has started its CLI, the CLI's child and its scratch folder are gone, and that run
completes; a scheduled run of a pool no worker serves is told late. Each fault tells exactly one
notification, and nothing of Prefect's or ours is noisy on the way.

Every run is made by Prefect's scheduler from a deployment's schedule: ``nightly``'s schedule is
driven (re-anchored a few seconds ahead and scheduled as the scheduler does, ``POST
/deployments/{id}/schedule``, so each fault happens once the one before was seen); ``backup``'s
and ``report``'s runs are made when they are deployed and come due minutes later (see
``DUE_AFTER`` for why: Prefect holds the state events of a run made less than 5 minutes
before). The wait makes the test last about 7 minutes."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli_fixtures import FAKE_CLI, FakeCli, envelope_answer, envelope_calls, styled
from helpers.homes import loud, new_user_environment, nexusflow_server, noise, served
from helpers.receiver import FLOW_RUN, Receiver, normalised
from helpers.servers import migrated_home, spawn, stop

# started first in its tier (tests/conftest.py's STARTED_FIRST): minutes, mostly waiting

NOT_LOGGED_IN = "Not logged in · Please run /login"  # claude -p with an empty HOME, exit 1 (test_auth.py)

JOB = """\
    entrypoint: nexusflow.job:agent_job
    work_pool:
      name: {pool}
    parameters:
      prompt: How warm is Lisbon tonight?
      style: claude
      command: claude
      model: sonnet
      transport: cli
      tools: ["nexusflow.demo:TOOLS"]
      approval: ["current_temperature"]
      wait: suspend
"""

PROJECT = f"""\
name: night
prefect-version: 3.9.1

pull:
  - prefect.deployments.steps.set_working_directory:
      directory: "{{{{ $PWD }}}}"

deployments:
  - name: nightly
{JOB.format(pool="night")}    schedules:
      - interval: 86400
        timezone: UTC
        active: false

  - name: backup
{JOB.format(pool="night")}    schedules:
      - interval: 86400
        anchor_date: "{{due}}"
        timezone: UTC

  - name: report
{JOB.format(pool="dark")}    schedules:
      - interval: 86400
        anchor_date: "{{due}}"
        timezone: UTC
"""
"""Three jobs of one night: ``nightly``, whose schedule the test drives (its runs are made just
before they are due), and ``backup`` and ``report``, due minutes after they are deployed.
``report``'s pool, ``dark``, has no worker all night: its run is told late whenever the others
end, however slow the machine."""

DUE_AFTER = timedelta(minutes=5, seconds=40)
"""When ``backup`` (killed with its worker) and ``report`` (no worker up) are due, after they are
deployed. Prefect's scheduler makes a run without an event of its Scheduled state, and Prefect's
triggers hold an event that follows an unseen one less than 5 minutes older for up to 15
minutes (``TIGHT_TIMING``, ``PRECEDING_EVENT_LOOKBACK``): a run picked up, or marked Late,
less than 5 minutes after the scheduler made it has each of its state events (Pending,
Running, Crashed, Late) held, and is told crashed or late a quarter of an hour late. A real
schedule's runs are made an hour or more ahead; the nightly runs here need no state event told
(their faults are nexusflow's own events), the two others do."""

SAVE_BLOCK = """\
import sys
from prefect.blocks.notifications import CustomWebhookNotificationBlock

CustomWebhookNotificationBlock(
    name="night", url=sys.argv[1], json_data={"subject": "{{subject}}", "body": "{{body}}"}
).save("night")
"""

LATE = "30s"
"""``--late``: longer than a worker up takes to pick a due run (it polls every 10 s)."""
STALLED = "30s"
"""``--stalled``: longer than any step of the night, the killed turn until the watch marks it."""


class Night:
    """The server's REST API as the test drives it (httpx: the test's own Prefect settings
    point at the tier's server, not at this home's)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.api = httpx.Client(base_url=url, timeout=30)
        deployment = self.call("GET", "/deployments/name/agent-job/nightly")
        self.deployment = deployment["id"]
        (schedule,) = deployment["schedules"]
        self.schedule = schedule["id"]

    def call(self, method: str, path: str, **options: Any) -> Any:
        """One request, again while the server answers 503 (SQLite busy), as Prefect's client does."""
        for attempt in range(20):
            response = self.api.request(method, path, **options)
            if response.status_code != 503:
                break
            time.sleep(min(0.5 * 2**attempt, 5))
        response.raise_for_status()
        return response.json() if response.content else None

    def first_run(self, deployment: str) -> dict[str, Any]:
        """The first run the scheduler made of a deployment's schedule, once it made it."""
        found = self.call("GET", f"/deployments/name/agent-job/{deployment}")
        query = {"deployments": {"id": {"any_": [found["id"]]}}, "sort": "EXPECTED_START_TIME_ASC", "limit": 1}
        deadline = time.monotonic() + 90
        while not (runs := self.call("POST", "/flow_runs/filter", json=query)):
            assert time.monotonic() < deadline, f"Prefect's scheduler made no run of {deployment}"
            time.sleep(1)
        return runs[0]

    def next_run(self) -> dict[str, Any]:
        """The schedule's next occurrence, a few seconds ahead, scheduled as the scheduler does.

        On a loaded machine the two requests can outlast the lead (a 503 is retried after a
        back-off); the scheduler then makes tomorrow's run instead, and the lead grows."""
        for lead in (2, 10, 40):
            due = (datetime.now(UTC) + timedelta(seconds=lead)).replace(microsecond=0)
            anchored = {"interval": 86400, "anchor_date": due.isoformat(), "timezone": "UTC"}
            schedule = {"active": True, "schedule": anchored}
            self.call("PATCH", f"/deployments/{self.deployment}/schedules/{self.schedule}", json=schedule)
            self.call("POST", f"/deployments/{self.deployment}/schedule", json={"max_runs": 1})
            query = {"deployments": {"id": {"any_": [self.deployment]}}}
            runs = [
                r
                for r in self.call("POST", "/flow_runs/filter", json=query)
                if _parsed(r["expected_start_time"]) == due
            ]
            if runs:
                (run,) = runs
                assert run["auto_scheduled"] and run["created_by"]["type"] == "SCHEDULE", run
                return run
        raise AssertionError(f"Prefect's scheduler made no run {lead} s ahead: {due}")

    def run(self, run_id: str) -> dict[str, Any]:
        return self.call("GET", f"/flow_runs/{run_id}")

    def wait(self, run_id: str, state: str, timeout: float = 120) -> dict[str, Any]:
        """Until the run's state is named ``state``; a final state other than it fails."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(run_id)
            now = run["state"]
            if now["name"] == state:
                return run
            assert now["type"] not in FINAL and time.monotonic() < deadline, f"{run['name']}: {now}, not {state}"
            time.sleep(0.5)


FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def _parsed(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _of_run(flow_run_id: str) -> list[int]:
    """The processes of a flow run: every process whose environment names it."""
    return _with(f"PREFECT__FLOW_RUN_ID={flow_run_id}")


def _with(variable: str) -> list[int]:
    """The live processes whose environment holds ``variable`` (``NAME=value``)."""
    needle = f"\0{variable}\0".encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as handle:
                    if needle in b"\0" + handle.read() + b"\0":
                        found.append(int(entry.name))
            except OSError:
                pass
    return [pid for pid in found if _alive(pid)]


def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^PPid:\s+(\d+)$", status, re.MULTILINE).group(1))  # type: ignore[union-attr]


def _until(done: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


@pytest.mark.timeout(900)
def test_a_night_tells_each_fault_once_and_leaves_nothing_behind(tmp_path):
    home, temp, project, bin_dir = (tmp_path / name for name in ("home", "tmp", "project", "bin"))
    for folder in (temp, project, bin_dir):
        folder.mkdir()
    migrated_home(home)
    shutil.copy(FAKE_CLI, bin_dir / "claude")
    (bin_dir / "claude").chmod(0o755 | stat.S_IXUSR)
    fake = FakeCli(tmp_path / "fake-cli")
    fake.root.mkdir()
    fake.script(
        styled("claude", envelope_answer("a quiet night in Lisbon")),  # healthy
        styled("claude", envelope_calls({"id": "c1", "name": "current_temperature", "arguments": {"city": "Lisbon"}})),
        styled("claude", envelope_answer("it is mild in Lisbon")),  # once approved
        {"stdout": NOT_LOGGED_IN + "\n", "exit": 1},  # its login is gone
        {"child": True, "sleep": 300},  # still thinking when its worker is killed
        styled("claude", envelope_answer("a quiet night in Lisbon")),  # the run after the kill
    )
    env = new_user_environment(home)
    venv = Path(sys.executable).parent  # `source .venv/bin/activate`
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{venv}{os.pathsep}{env['PATH']}", TMPDIR=str(temp), FAKE_CLI_DIR=str(fake.root)
    )
    receiver = Receiver()
    outputs: list[str] = []
    logs: list[Path] = []

    def command(*argv: str) -> str:
        done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        outputs.append(done.stdout + done.stderr)
        return done.stdout + done.stderr

    def worker(stack: ExitStack) -> subprocess.Popen[bytes]:
        log = tmp_path / f"worker-{len(logs)}.log"
        logs.append(log)
        return spawn(["prefect", "worker", "start", "--pool", "night"], env, project, log, stack)

    server_log = tmp_path / "server.log"
    started, phases = time.monotonic(), {}
    try:
        with nexusflow_server(env, server_log) as server, ExitStack() as stack:
            url = served(server)
            env["PREFECT_API_URL"] = url  # eval "$(nexusflow server --env)"
            ui = url.removesuffix("/api") + "/runs/flow-run/"
            for pool in ("night", "dark"):
                command("prefect", "work-pool", "create", pool, "--type", "process")
            deploying = datetime.now(UTC).replace(microsecond=0)
            due = deploying + DUE_AFTER
            (project / "prefect.yaml").write_text(PROJECT.replace("{due}", due.isoformat()))
            command("prefect", "--no-prompt", "deploy", "--all")
            command(sys.executable, "-c", SAVE_BLOCK, receiver.url)
            alerts = ["--notify", "custom-webhook/night", "--late", LATE, "--stalled", STALLED]
            installed = command("nexusflow", "alerts", "install", *alerts)
            assert installed.splitlines()[-1] == "nexusflow: 8 alerts send through custom-webhook/night", installed
            night = Night(url)
            killed, late = night.first_run("backup"), night.first_run("report")
            for run, told in ((killed, "Pending"), (late, "Late")):
                assert _parsed(run["expected_start_time"]) == due and run["auto_scheduled"], run
                ahead = due - _parsed(run["state"]["timestamp"])
                held = f"made {ahead} ahead: its {told} event would be held (DUE_AFTER)"
                assert ahead > timedelta(minutes=5, seconds=10), held
            phases["set up"] = time.monotonic() - started
            working = worker(stack)

            # a healthy run: nothing to tell
            healthy = night.next_run()
            night.wait(healthy["id"], "Completed")
            phases["healthy"] = time.monotonic() - started

            # a run that waits for an approval, answered with the command it told
            asks = night.next_run()
            night.wait(asks["id"], "Suspended")
            told = receiver.wait_for(lambda bodies: any("waits for an answer" in b["subject"] for b in bodies))
            (body,) = [b["body"] for b in told if "waits for an answer" in b["subject"]]
            answer = re.search(r"answer with: (nexusflow answer \S+) --approve\|--deny;", body)
            assert answer is not None, body
            command("bash", "-c", f"{answer.group(1)} --approve")
            night.wait(asks["id"], "Completed")
            phases["approval"] = time.monotonic() - started

            # the CLI's login is gone
            logged_out = night.next_run()
            failed = night.wait(logged_out["id"], "Failed")
            phases["login"] = time.monotonic() - started

            # the backup's run, killed with its worker while the CLI of its turn thinks
            left = (due - datetime.now(UTC)).total_seconds()
            night.wait(killed["id"], "Running", timeout=left + 60)
            _until(lambda: len(fake.calls()) == 5 and fake.children(), "the backup's CLI starts")
            cli, grandchild = fake.calls()[4]["pid"], fake.children()[0]
            holder = _parent(cli)  # the flow run's process, in a session of its own (Prefect 3.9's worker)
            assert _parent(holder) == working.pid
            os.killpg(working.pid, signal.SIGKILL)
            os.killpg(holder, signal.SIGKILL)  # killed with its worker: the machine's power went
            working.wait()
            crashed = night.wait(killed["id"], "Crashed", timeout=60)  # nexusflow server's watch
            phases["killed"] = time.monotonic() - started
            working = worker(stack)
            after = night.next_run()
            night.wait(after["id"], "Completed")
            _until(lambda: not _of_run(killed["id"]), "the killed run's processes are reaped", timeout=30)
            assert not _alive(cli) and not _alive(grandchild), "its CLI and the CLI's child are gone"
            ours = sorted(p.name for p in temp.iterdir() if p.name.startswith("nexusflow"))
            assert ours == [], "no launch's note, no CLI's scratch folder"
            phases["the run after"] = time.monotonic() - started

            # the report's pool has no worker all night
            _until(lambda: not _of_run(after["id"]), "its process ends (its output is the worker's)")
            stop(working)
            left = (due - datetime.now(UTC)).total_seconds()
            told_late = max(left, 0) + 15 + 30 + 60  # Prefect marks it Late 15 s after, --late 30s after that
            receiver.wait_for(lambda bodies: any("has not started" in b["subject"] for b in bodies), timeout=told_late)
            still = night.run(late["id"])["state"]["name"]
            phases["late"] = time.monotonic() - started
            time.sleep(5)  # a second notification of the same fault would come with the first
            session = {run["id"]: f"job-{run['id']}" for run in (killed, asks, logged_out)}
    finally:
        outputs += [log.read_text(errors="replace") for log in [server_log, *logs] if log.exists()]
        for pid in _with(f"FAKE_CLI_DIR={fake.root}"):  # a test failed midway: none of its processes lingers
            os.kill(pid, signal.SIGKILL)
    everything = "\n".join(outputs)
    print("seconds since the start:", {phase: round(at) for phase, at in phases.items()})  # pytest -s

    assert len(fake.calls()) == 6, "each turn asked once: none again after the kill"
    assert crashed["state"]["message"] == (
        f'nexusflow: session "{session[killed["id"]]}": its process {holder} on this machine died;'
        " found by nexusflow server's watch"
    )
    assert failed["state"]["message"].endswith(
        f"auth: claude is not logged in: {NOT_LOGGED_IN}; run claude /login as the user the job runs as"
    ), failed["state"]
    assert still == "Late"
    got = sorted((b["subject"], normalised(b["body"])) for b in receiver.bodies)
    assert got == sorted(
        [
            (
                f"nexusflow: {killed['name']} crashed",
                f"{crashed['state']['message']}; flow run: {FLOW_RUN}{killed['id']}",
            ),
            (
                f"nexusflow: {session[asks['id']]} waits for an answer",
                'Allow the tool "current_temperature" to run with {"city": "Lisbon"}? (tool current_temperature);'
                f" answer with: nexusflow answer {asks['id']} --approve|--deny; flow run: {FLOW_RUN}{asks['id']}",
            ),
            (
                "nexusflow: claude needs a login",
                f"auth: claude is not logged in: {NOT_LOGGED_IN}; run claude /login as the user the job runs as;"
                f" session {session[logged_out['id']]}; flow run: {FLOW_RUN}{logged_out['id']}",
            ),
            (
                f"nexusflow: {late['name']} has not started",
                f"due at <time>, still Late {LATE} after Prefect marked it late: is a worker up for its pool?;"
                f" flow run: {FLOW_RUN}{late['id']}",
            ),
        ]
    ), f"one notification per fault, none for the healthy runs: {got}"
    assert all(ui in b["body"] for b in receiver.bodies), "the links are the server's UI"
    assert noise(everything) == [], loud(everything)
