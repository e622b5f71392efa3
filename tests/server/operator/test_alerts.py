"""Alerts out of the box, on a real Prefect server (its triggers and actions services) with a
real notification block pointed at an HTTP receiver on 127.0.0.1: each fault tells one
notification, a healthy run none, installing twice changes nothing, removing stops them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from approvals import ASKING_DEPLOY
from helpers.command import nexusflow_here
from helpers.receiver import FLOW_RUN, Receiver, normalised

if TYPE_CHECKING:
    from prefect.client.orchestration import PrefectClient

T = TypeVar("T")
pytestmark = [pytest.mark.slow]

TOOLS = (
    ASKING_DEPLOY
    + '''
import time
from nexusflow import tool

@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

@tool
def nap(seconds: float) -> str:
    """Sleep."""
    time.sleep(seconds)
    return "rested"
'''
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    yield got
    got.server.shutdown()


@pytest.fixture
def quiet_logs(capsys: pytest.CaptureFixture[str]) -> None:
    """Prefect's console logging set up on the real stderr, as ``nexusflow_here`` does, before
    a fixture's Prefect call would set it up on this test's captured one (closed after it)."""
    from prefect.logging.configuration import ensure_logging_setup

    with capsys.disabled():
        ensure_logging_setup()


@pytest.fixture
def block(quiet_logs: None, receiver: Receiver) -> Iterator[str]:
    """A saved notification block that posts ``{subject, body}`` to the receiver."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    name = f"alerts-{uuid.uuid4().hex[:8]}"
    CustomWebhookNotificationBlock(
        name=name, url=receiver.url, json_data={"subject": "{{subject}}", "body": "{{body}}"}
    ).save(name)
    yield f"custom-webhook/{name}"
    from nexusflow import remove_alerts_sync

    remove_alerts_sync()  # a test that failed midway leaves no alert for the next ones


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "alerting_tools.py"
    path.write_text(TOOLS)
    return path


def _api(make: Callable[[PrefectClient], Awaitable[T]]) -> T:
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def call() -> T:
        async with get_client() as client:
            return await make(client)

    return run_coro_as_sync(call())


def _automations() -> list[str]:
    async def names(client: PrefectClient) -> list[str]:
        return sorted(a.name for a in await client.read_automations())

    return _api(names)


def _run_id(name: str) -> str:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    async def find(client: PrefectClient) -> str:
        (run,) = await client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
        return str(run.id)

    return _api(find)


def _started(run_name: str, step: str) -> float:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, TaskRunFilter, TaskRunFilterName

    async def find(client: PrefectClient) -> float:
        (task,) = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run_name])),
            task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=[step])),
        )
        assert task.start_time is not None
        return task.start_time.timestamp()

    return _api(find)


def _late_run(name: str) -> str:
    """A run of an ``agent-job`` deployment, due now, that no worker will start."""
    from prefect.states import Scheduled

    async def make(client: PrefectClient) -> str:
        flow_id = await client.create_flow_from_name("agent-job")
        deployment = await client.create_deployment(flow_id=flow_id, name=f"late-{uuid.uuid4().hex[:6]}")
        run = await client.create_flow_run_from_deployment(
            deployment, name=name, state=Scheduled(scheduled_time=datetime.now(UTC))
        )
        return str(run.id)

    return _api(make)


def _crashed_run(name: str) -> str:
    """A run of ``agent_run`` marked Crashed, as anything that finds its process dead marks it."""
    from prefect.states import Crashed, Running

    from nexusflow import agent_run

    async def make(client: PrefectClient) -> str:
        run = await client.create_flow_run(agent_run, name=name, state=Running())
        await client.set_flow_run_state(run.id, Crashed(message=f"{name}: its process died"), force=True)
        return str(run.id)

    return _api(make)


def _failed_canary(name: str) -> str:
    """A run of the styles canary failed as a drifted CLI fails it."""
    from prefect.states import Failed, Running

    from nexusflow.job import styles_canary

    async def make(client: PrefectClient) -> str:
        run = await client.create_flow_run(styles_canary, name=name, state=Running())
        message = f"styles canary: claude CLI claude (2.1.332 (Claude Code)) failed a check ({name})"
        await client.set_flow_run_state(run.id, Failed(message=message), force=True)
        return str(run.id)

    return _api(make)


def _sentinel(block: str) -> str:
    """An Automation of the user's own, on the same event and block as the "failed" alert."""
    from prefect.events.actions import SendNotification
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

    kind, _, name = block.partition("/")

    async def make(client: PrefectClient) -> str:
        document = await client.read_block_document_by_name(name, kind)
        trigger = EventTrigger(expect={"nexusflow.run.failed"}, posture=Posture.Reactive)
        action = SendNotification(block_document_id=document.id, subject="mine", body="{{ event.resource.name }}")
        return str(await client.create_automation(AutomationCore(name="my own", trigger=trigger, actions=[action])))

    return _api(make)


@pytest.mark.timeout(150)
def test_each_fault_tells_one_notification_and_a_healthy_run_none(capsys, block, receiver, tools):
    from nexusflow import AuthRequired, QuotaExhausted, create_in_process_client

    installed = nexusflow_here(capsys, "alerts", "install", "--notify", block, "--late", "10s", "--stalled", "10s")
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert installed.stderr.splitlines()[-1] == f"nexusflow: 8 alerts send through {block}"
    due = time.time()
    tag = uuid.uuid4().hex[:6]
    late = f"late-{tag}"
    late_id = _late_run(late)
    napping = ['call nap {"seconds": 14}', "--tools", f"{tools}:nap", "--session", f"stalls-{tag}"]
    stalled = subprocess.Popen(
        [sys.executable, "-m", "nexusflow", "run", *napping],
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return nexusflow_here(capsys, "run", *args)

    healthy = run('call add {"a": 2, "b": 3}', "--tools", f"{tools}:add", "--session", f"healthy-{tag}")
    assert healthy.returncode == 0, healthy.stderr[-3000:]
    failed = run(
        'call add {"a": 2, "b": 3}', "--tools", f"{tools}:add", "--max-turns", "1", "--session", f"fails-{tag}"
    )
    assert failed.returncode == 1, failed.stderr[-3000:]
    failed_at = time.time()
    waiting = run('call deploy {"service": "web"}', "--tools", f"{tools}:deploy", "--session", f"waits-{tag}")
    assert waiting.returncode == 3, waiting.stderr[-3000:]

    def logged_out(request: object) -> str:
        raise AuthRequired(f"api-{tag}", "token expired", "api login")

    auth = create_in_process_client(logged_out).run_sync("go", session_id=f"login-{tag}")
    assert auth.error_type == "AuthRequired"

    def spent(request: object) -> str:
        raise QuotaExhausted(f"api-{tag}", datetime(2030, 1, 1, 3, 0, tzinfo=UTC), "weekly limit")

    quota = create_in_process_client(spent).run_sync("go", session_id=f"quota-{tag}")
    assert quota.error_type == "QuotaExhausted", quota.error
    crashed_id = _crashed_run(f"agent-crashes-{tag}")
    canary_id = _failed_canary(f"canary-{tag}")
    _, stalled_err = stalled.communicate(timeout=60)
    assert stalled.returncode == 0, stalled_err[-3000:]

    def ours(bodies: list[dict[str, str]]) -> list[dict[str, str]]:
        """What this test's runs told: another test's run left late on this server may tell too."""
        return [body for body in bodies if tag in body["subject"]]

    receiver.wait_for(lambda bodies: len(ours(bodies)) >= 8, timeout=60)
    time.sleep(5)  # a second notification of the same fault would come with the first
    ui = FLOW_RUN
    got = sorted((b["subject"], normalised(b["body"])) for b in ours(receiver.bodies))
    assert got == sorted(
        [
            (
                f"nexusflow: fails-{tag} failed",
                f"max turns exceeded: no final answer after 1 turns; flow run: {ui}{_run_id(f'agent-fails-{tag}')}",
            ),
            (
                f"nexusflow: waits-{tag} waits for an answer",
                f"May I deploy web? (tool deploy); answer with: nexusflow answer waits-{tag} --approve|--deny;"
                f" flow run: {ui}{_run_id(f'agent-waits-{tag}')}",
            ),
            (
                f"nexusflow: api-{tag} needs a login",
                f"auth: api-{tag} is not logged in: token expired; run api login as the user the job runs as;"
                f" session login-{tag}; flow run: {ui}{auth.flow_run_id}",
            ),
            (
                f"nexusflow: api-{tag} quota spent",
                f"quota: api-{tag} limit reached (resets 2030-01-01T03:00:00+00:00): weekly limit;"
                f" resets at 2030-01-01T03:00:00+00:00; session quota-{tag}: the run fails;"
                f" flow run: {ui}{quota.flow_run_id}",
            ),
            (
                f"nexusflow: agent-crashes-{tag} crashed",
                f"agent-crashes-{tag}: its process died; flow run: {ui}{crashed_id}",
            ),
            (
                f"nexusflow: styles canary canary-{tag} failed",
                f"styles canary: claude CLI claude (2.1.332 (Claude Code)) failed a check (canary-{tag});"
                f" flow run: {ui}{canary_id}",
            ),
            (
                f"nexusflow: agent-stalls-{tag} made no progress for 10s",
                "step tool-0-nap has run since <time> with nothing new;"
                f" flow run: {ui}{_run_id(f'agent-stalls-{tag}')}",
            ),
            (
                f"nexusflow: {late} has not started",
                "due at <time>, still Late 10s after Prefect marked it late: is a worker up for its pool?;"
                f" flow run: {ui}{late_id}",
            ),
        ]
    ), "one notification per fault, none for the healthy run"
    told_at = {b["subject"]: t for b, t in zip(receiver.bodies, receiver.times, strict=False)}
    measured = {  # printed for the docs' bounds (pytest -s), not asserted
        "failed, after the run ended": told_at[f"nexusflow: fails-{tag} failed"] - failed_at,
        "stalled, after the step started": told_at[f"nexusflow: agent-stalls-{tag} made no progress for 10s"]
        - _started(f"agent-stalls-{tag}", "tool-0-nap"),
        "late, after the run was due": told_at[f"nexusflow: {late} has not started"] - due,
    }

    # listed; installed again: the same Automations, updated in place
    listed = nexusflow_here(capsys, "alerts", "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (c, "yes", "10s" if c in ("late", "stalled") else "-", block)
        for c in ("waiting", "failed", "crashed", "quota", "auth", "late", "stalled", "canary")
    ]
    ids = _automation_ids()
    again = nexusflow_here(capsys, "alerts", "install", "--notify", block)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _automation_ids() == ids, "no duplicate, no new id"
    relisted = nexusflow_here(capsys, "alerts", "list").stdout.splitlines()
    assert [line.split()[2] for line in relisted[1:]] == ["-"] * 5 + ["15m", "30m", "-"]

    # removed: only ours, and nothing is told any more
    mine = _sentinel(block)
    removed = nexusflow_here(capsys, "alerts", "remove")
    assert removed.returncode == 0 and removed.stderr.splitlines()[-1] == "nexusflow: removed 8 alerts"
    assert [name for name in _automations() if name.startswith("nexusflow")] == []
    assert "my own" in _automations()
    told = len(receiver.bodies)
    again_failed = run(
        'call add {"a": 1, "b": 1}', "--tools", f"{tools}:add", "--max-turns", "1", "--session", f"fails-again-{tag}"
    )
    assert again_failed.returncode == 1
    receiver.wait_for(lambda bodies: any(body["subject"] == "mine" for body in bodies[told:]), timeout=30)
    time.sleep(3)
    assert [b for b in receiver.bodies[told:] if tag in b["subject"] + b["body"]] == [
        {"subject": "mine", "body": f"fails-again-{tag}"}
    ]
    _api(lambda client: client.delete_automation(uuid.UUID(mine)))
    _api(lambda client: client.delete_flow_run(uuid.UUID(late_id)))  # no late run left for later tests
    print("seconds:", {what: round(seconds, 1) for what, seconds in measured.items()})


def _automation_ids() -> list[tuple[str, str]]:
    async def ids(client: PrefectClient) -> list[tuple[str, str]]:
        return sorted((a.name, str(a.id)) for a in await client.read_automations() if "nexusflow-alerts" in a.tags)

    return _api(ids)


@pytest.mark.timeout(60)
def test_a_block_that_is_missing_or_cannot_notify_is_refused_and_nothing_changes(capsys, quiet_logs, receiver):
    from prefect.blocks.webhook import Webhook

    name = f"plain-{uuid.uuid4().hex[:8]}"
    Webhook(url=receiver.url).save(name)
    before = _automations()
    missing = nexusflow_here(capsys, "alerts", "install", "--notify", "custom-webhook/no-such-block")
    assert (missing.returncode, missing.stderr) == (
        1,
        'nexusflow: error: alerts: no block "custom-webhook/no-such-block" on the Prefect server:'
        " save the notification block first\n",
    )
    plain = nexusflow_here(capsys, "alerts", "install", "--notify", f"webhook/{name}")
    assert (plain.returncode, plain.stderr) == (
        1,
        f'nexusflow: error: alerts: block "webhook/{name}" cannot send notifications: give a notification block'
        " (custom-webhook, slack-webhook, ms-teams-webhook, ...)\n",
    )
    shapeless = nexusflow_here(capsys, "alerts", "install", "--notify", "night-alerts")
    assert (shapeless.returncode, shapeless.stderr) == (
        2,
        "nexusflow: alerts: --notify takes a block's <type>/<name>, like custom-webhook/night-alerts,"
        " not 'night-alerts'\n",
    )
    short = nexusflow_here(capsys, "alerts", "install", "--notify", f"webhook/{name}", "--late", "5s")
    assert (short.returncode, short.stderr) == (
        2,
        "nexusflow: alerts: --late must be a duration from 10s to 365d (30s, 15m, 2h), not '5s'\n",
    )
    from nexusflow import AlertsError, install_alerts_sync

    with pytest.raises(AlertsError, match='^alerts: no block "custom-webhook/gone" on the Prefect server'):
        install_alerts_sync("custom-webhook/gone")
    assert _automations() == before


@pytest.mark.timeout(90)
def test_a_step_marked_crashed_tells_the_stalled_alert_it_ended(quiet_logs):
    """Prefect's server emits no event when a task run's state is set through its API: a step
    that whatever found its run dead marked Crashed must say so itself, else the "stalled"
    alert, waiting for the step's next event, tells a stall after every crash (seen in
    tests/homes/test_night.py: a killed run told "crashed" and, ``--stalled`` later, "made no
    progress")."""
    from prefect import task
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter
    from prefect.states import Running

    from nexusflow import agent_run
    from nexusflow._prefect.session_lock import STEP_CRASHED, mark_crashed

    async def crash(client: PrefectClient) -> tuple[str, str]:
        run = await client.create_flow_run(agent_run, name=f"agent-steps-{uuid.uuid4().hex[:6]}", state=Running())
        nap = task(name="tool-0-nap")(lambda: None)
        step = await client.create_task_run(nap, run.id, "0", name="tool-0-nap", state=Running())
        await mark_crashed(client, {str(run.id): "its process died"})
        return str(run.id), str(step.id)

    run_id, step_id = _api(crash)
    wanted = EventFilter(
        event=EventNameFilter(name=[STEP_CRASHED]), resource=EventResourceFilter(id=[f"prefect.task-run.{step_id}"])
    )
    deadline = time.monotonic() + 60
    while not (events := _api(lambda client: client.read_events(filter=wanted, limit=10)).events):
        assert time.monotonic() < deadline, "no event says the step crashed"
        time.sleep(0.5)
    (event,) = events
    assert event.resource.name == "tool-0-nap" and event.payload == {"message": "its process died"}
    related = {(r.role, r.id) for r in event.related}  # and a run the emitting context holds, if any
    assert ("flow-run", f"prefect.flow-run.{run_id}") in related, related
    assert "agent_run" in {r.name for r in event.related if r.role == "flow"}, event.related
    step = _api(lambda client: client.read_task_run(uuid.UUID(step_id)))
    assert step.state is not None and step.state.name == "Crashed"
