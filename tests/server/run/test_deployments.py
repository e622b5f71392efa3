"""The repository's prefect.yaml, deployed to the session's server and run by a real process
worker: a scheduled job runs to completion; a job that asks suspends, exits, and completes
after it is answered, its finished steps replayed."""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound

from nexusflow import list_sessions

from cli_fixtures import envelope_answer, envelope_calls, styled
from deployments import deployed, prefect, state_of, wait_for_state  # noqa: F401 (deployed: a fixture)
from helpers.docs import block, block_marked
from helpers.homes import loud, new_user_environment, nexusflow_server, noise, served
from helpers.prefect_api import task_runs
from helpers.servers import migrated_home
from paths import REPO

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.xdist_group("deployments"),  # one worker deploys the project once for all
]


def work_once() -> None:
    prefect("worker", "start", "--pool", "local", "--run-once", timeout=600)


@pytest.mark.slow
@pytest.mark.usefixtures("deployed")
async def test_deploy_all_and_a_scheduled_job_runs_through_a_worker():
    async with get_client() as client:
        deployment = await client.read_deployment_by_name("agent-job/weather-report")
    assert deployment.schedules and deployment.schedules[0].schedule.cron == "0 6 * * *"
    run = await run_deployment("agent-job/weather-report", timeout=0)
    await anyio.to_thread.run_sync(work_once)
    state = await wait_for_state(run.id, lambda s: s.is_final())
    assert state.is_completed(), state
    names = sorted(r.name for r in await task_runs(str(run.id), expected=6))
    assert names == [
        "tool-0-current_temperature",
        "tool-0-current_temperature-2",
        "tool-1-celsius_to_fahrenheit_delta",
        "turn-0",
        "turn-1",
        "turn-2",
    ]


@pytest.mark.slow
@pytest.mark.usefixtures("deployed")
async def test_a_job_that_asks_suspends_exits_and_completes_once_answered():
    run = await run_deployment("agent-job/approval-demo", timeout=0)
    await anyio.to_thread.run_sync(work_once)
    suspended = await wait_for_state(run.id, lambda s: s.is_paused())
    assert suspended.name == "Suspended"

    answer = subprocess.run(
        [sys.executable, "-m", "nexusflow", "answer", str(run.id), "--approve"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    await anyio.to_thread.run_sync(work_once)
    state = await wait_for_state(run.id, lambda s: s.is_final())
    assert state.is_completed(), state

    runs = await task_runs(str(run.id), expected=7)
    by_name: dict[str, list[str]] = {}
    for task_run in runs:
        by_name.setdefault(task_run.name, []).append(task_run.state.name)
    assert "Cached" in by_name["turn-0"], "the finished turn replays after the resume"
    first, approved = by_name["tool-0-current_temperature"], by_name["tool-0-current_temperature-approved"]
    assert sorted(first) == ["AwaitingAnswer", "Cached"], "the first attempt asked, and replays after the resume"
    assert approved == ["Completed"], "the call ran once, after the approval"
    assert by_name["wait-0-current_temperature"] == ["Approved"] and "turn-1" in by_name
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    async with get_client() as client:
        logs = [log.message for log in await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))]
    said = [m for m in logs if m.startswith(("Suspending flow run", "waiting for an answer"))]
    assert [m.split(",")[0].split(" to ")[0] for m in said] == ["waiting for an answer", "Suspending flow run"], (
        "the resumed run goes on with its answer without saying it waits again"
    )


async def test_job_parameters_are_validated_at_the_boundary():
    from nexusflow.job import agent_job

    state = await agent_job(prompt="hi", style="clod", return_state=True)
    assert state.is_failed()
    assert "style: Input should be 'claude'" in state.message

    ok = await agent_job(
        prompt='call current_temperature {"city": "Tokyo"}', tools=["nexusflow.demo:TOOLS"], return_state=True
    )
    assert ok.is_completed(), ok
    result = await ok.aresult()
    assert result.text == 'current_temperature: {"city":"Tokyo","celsius":15.5}'


@pytest.mark.slow
async def test_the_readmes_serve_recipe_serves_a_deployment_whose_runs_succeed(tmp_path):
    script = tmp_path / "serve_job.py"
    script.write_text(block("serve-job"))
    served = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        async with get_client() as client:
            while True:
                try:
                    deployment = await client.read_deployment_by_name("agent-job/weather")
                    break
                except ObjectNotFound:
                    assert served.poll() is None and time.monotonic() < deadline, "the recipe serves"
                    await anyio.sleep(0.5)
        assert deployment.schedules[0].schedule.cron == "0 6 * * *"
        run = await run_deployment("agent-job/weather", timeout=0)
        state = await wait_for_state(run.id, lambda s: s.is_final(), timeout=180)
        assert state.is_completed(), state.message
    finally:
        os.killpg(served.pid, signal.SIGTERM)
        served.wait(timeout=30)
    names = sorted(r.name for r in await task_runs(str(run.id), expected=3))
    assert names == ["tool-0-current_temperature", "turn-0", "turn-1"]


@pytest.mark.slow
@pytest.mark.usefixtures("deployed")
async def test_a_job_whose_quota_is_spent_frees_its_worker_and_completes_after_the_reset(fake, monkeypatch):
    """The CLI says its window resets in 8 s (``NEXUSFLOW_ON_QUOTA=wait``, which the worker
    and its runs inherit): the run goes back to Scheduled at the reset and its process ends;
    a worker started after the reset runs it again, the finished steps replay, and nothing
    ran twice. While it waits, ``nexusflow sessions`` shows it waiting for the reset (on
    906ad32 it showed running, then crashed once its lease went stale, and ``prune`` would
    have deleted it)."""
    call = envelope_calls({"id": "c1", "name": "current_temperature", "arguments": {"city": "Oslo"}})
    spent = {
        "stderr": json.dumps({"error": {"message": "Quota exceeded. Please retry in 8s.", "code": 429}}),
        "exit": 1,
    }
    fake.script(styled("gemini", call), spent, styled("gemini", envelope_answer("it is mild")))
    monkeypatch.setenv("NEXUSFLOW_ON_QUOTA", "wait")
    parameters = {"prompt": "How warm is Oslo?", "style": "gemini", "command": fake.command, "model": "gemini-2.5-pro"}
    run = await run_deployment("agent-job/weather-report", parameters={**parameters, "transport": "cli"}, timeout=0)
    await anyio.to_thread.run_sync(work_once)  # returns: the run gave its process back
    gave_back = datetime.now(UTC)

    waiting = await state_of(run.id)
    assert waiting is not None and waiting.is_scheduled() and waiting.name == "AwaitingQuota", waiting
    reset = waiting.state_details.scheduled_time
    # The reset is 8 s after the CLI said so: after its launch, before the process gave back.
    # Not "still ahead of now": on a loaded machine the worker's exit can take longer (CI).
    met = datetime.fromtimestamp(fake.calls()[1]["time"], UTC)
    assert reset is not None and met + timedelta(seconds=8) <= reset <= gave_back + timedelta(seconds=8), (
        f"scheduled at the reset: {reset}, the quota met at {met}, the process gave back at {gave_back}"
    )
    # Its process is gone and its lease no longer beats: the session is waiting, not
    # crashed, so `prune` (crashed sessions by default) keeps what the reset replays.
    session = next(info for info in await list_sessions() if info.flow_run_id == str(run.id))
    assert session.state == "waiting", session
    assert session.waits_for is not None and session.waits_for.startswith("quota reset at "), session
    assert session.session_id not in {info.session_id for info in await list_sessions(state=["crashed"])}
    await anyio.sleep(max(0.0, (reset - datetime.now(UTC)).total_seconds()) + 0.5)
    await anyio.to_thread.run_sync(work_once)
    state = await wait_for_state(run.id, lambda s: s.is_final())
    assert state.is_completed(), state
    assert len(fake.calls()) == 3, "turn 0, the turn that met the quota, and that turn again"
    runs = await task_runs(str(run.id), expected=4, including=("turn-1",))
    by_name: dict[str, list[str]] = {}
    for task_run in runs:
        by_name.setdefault(task_run.name, []).append(task_run.state.name)
    assert sorted(by_name["tool-0-current_temperature"]) == ["Cached", "Completed"], "the tool ran once"
    assert sorted(by_name["turn-0"]) == ["Cached", "Completed"], "the first turn was asked once"


def header_commands() -> list[str]:
    """The commands of prefect.yaml's header, in order, without their comments."""
    commands = []
    for line in (REPO / "prefect.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("#   "):
            commands.append(line[4:].split("  #")[0].strip())
    return commands


def bash(script: str, env: dict[str, str], **options) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", "-ec", script],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **options,
    )


@pytest.mark.slow
def test_prefect_yamls_header_as_written_runs_a_job_on_the_homes_nexusflow_server(tmp_path):
    """A new user (no API URL, telemetry not opted out, the virtual environment active)
    follows the header: ``nexusflow server`` in one terminal, then each command after
    ``eval "$(nexusflow server --env)"``, the worker in a terminal of its own. Every command
    talks to that server (followed literally before, each started a temporary server of its
    own on the same database), quietly, and the job runs to completion on it. docs/operating.md
    gives the same commands."""
    start, setup, pool, deploy, worker, run = header_commands()
    assert (start, setup) == ("nexusflow server", 'eval "$(nexusflow server --env)"')
    documented = block_marked("sets up a terminal") + block_marked("deploys and starts a long-lived worker")
    assert all(command in documented for command in (setup, pool, deploy, worker)), documented
    migrated_home(tmp_path)
    env = new_user_environment(tmp_path)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # `source .venv/bin/activate`
    outputs = []
    with nexusflow_server(env, tmp_path.parent / f"{tmp_path.name}-server.log") as server:
        url = served(server)
        outputs.append(bash(f"{setup}\n{pool}\n{deploy}", env).communicate(timeout=300)[0])
        working = bash(f"{setup}\n{worker}", env)
        try:
            started = bash(f"{setup}\n{run}", env).communicate(timeout=300)[0]
            outputs.append(started)
            flow_run = started.split("UUID: ")[1].split()[0]
            deadline = time.monotonic() + 300
            while (state := httpx.get(f"{url}/flow_runs/{flow_run}").json()["state"]["type"]) not in FINAL:
                assert time.monotonic() < deadline and working.poll() is None, f"the run stayed {state}"
                time.sleep(1)
            deployed = httpx.get(f"{url}/deployments/name/agent-job/weather-report").status_code
        finally:
            os.killpg(working.pid, signal.SIGKILL)
            outputs.append(working.communicate()[0])
    everything = "\n".join(outputs)
    assert state == "COMPLETED", everything[-3000:]
    assert "Starting temporary server" not in everything
    assert noise(everything) == [], loud(everything)
    assert deployed == 200


FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
