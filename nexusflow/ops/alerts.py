"""Alerts out of the box: Prefect Automations that tell someone, through any Prefect
notification block, when a job left alone needs a person.

Each alert is one Automation named ``nexusflow alert: <condition>`` and tagged
``nexusflow-alerts``; installing again updates them in place, removing deletes only those.
The Automations run on the Prefect server (its triggers and actions services), so an alert
goes out whether or not any nexusflow process still lives. The triggers, and how late each
alert comes, are in docs/operating.md ("Alerts").
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal, get_args
from uuid import UUID

from prefect.client.orchestration import PrefectClient, get_client
from prefect.events.actions import SendNotification
from prefect.events.filters import AutomationFilter, AutomationFilterTags
from prefect.events.schemas.automations import Automation, AutomationCore, EventTrigger, Posture
from prefect.exceptions import ObjectNotFound
from prefect.utilities.asyncutils import run_coro_as_sync
from pydantic import BaseModel

from .._prefect.server import use_server
from .._prefect.session_lock import STEP_CRASHED
from .errors import alerts_bad_block, alerts_bad_bound, alerts_no_block, alerts_not_notifying

Condition = Literal["waiting", "failed", "crashed", "quota", "auth", "late", "stalled", "canary"]
CONDITIONS: tuple[Condition, ...] = get_args(Condition)

TAG = "nexusflow-alerts"
"""What marks an Automation as one of nexusflow's: ``remove_alerts`` deletes these only."""
PREFIX = "nexusflow alert: "
LATE = timedelta(minutes=15)
STALLED = timedelta(minutes=30)
SHORTEST = timedelta(seconds=10)
"""Prefect's shortest window for a proactive trigger (one that fires on an absence)."""
LONGEST = timedelta(days=365)

RUN_FLOW = "agent_run"
"""The flow every nexusflow run is: its failures, crashes and stalls are the ones told."""
JOB_FLOW = "agent-job"
"""``nexusflow.job:agent_job``: a deployment's run holds its session itself (no ``agent_run``
beneath it), so its crash is told too."""
CANARY_FLOW = "styles-canary"
"""``nexusflow.job:styles_canary``: its failure names the CLI that drifted."""
DEPLOYED_FLOWS = (JOB_FLOW, RUN_FLOW, CANARY_FLOW)
"""The flows nexusflow deploys: a scheduled run of one that does not start is told."""

_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]*/[^/\s]+$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_LINK = "{% if flow_run %}; flow run: {{ flow_run|ui_url or flow_run.id }}{% endif %}"
"""The flow run's page in the UI (its id where the server has no UI address)."""


class Alert(BaseModel):
    """One installed alert, as ``nexusflow alerts list`` shows it."""

    condition: str
    name: str
    automation_id: UUID
    enabled: bool
    notify: str | None
    """The block it sends through (``<type>/<name>``); None if that block was deleted."""
    within: timedelta | None = None
    """For ``late`` and ``stalled``: the bound the absence is measured against."""


def bound(name: str, value: timedelta | str) -> timedelta:
    """``--late`` or ``--stalled``: a duration (``15m``, ``90s``, ``2h``) from ``SHORTEST``,
    the shortest window Prefect evaluates an absence over, to ``LONGEST``."""
    parsed: timedelta | None = value if isinstance(value, timedelta) else None
    match = _DURATION.match(value) if isinstance(value, str) else None
    if match is not None:
        seconds = float(match.group(1)) * _UNIT[match.group(2)]
        parsed = timedelta(seconds=seconds) if seconds <= LONGEST.total_seconds() else None
    if parsed is None or not SHORTEST <= parsed <= LONGEST:
        raise alerts_bad_bound(name, value, SHORTEST, LONGEST)
    return parsed


def shown_duration(within: timedelta) -> str:
    """``15m``, ``2h``, ``90s``: as the flags take it."""
    seconds = int(within.total_seconds())
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _automations(block: UUID, late: timedelta, stalled: timedelta) -> dict[Condition, AutomationCore]:
    """What each condition is, as a trigger and the message it sends."""
    session: dict[str, str | list[str]] = {"prefect.resource.id": "nexusflow.session.*"}
    holders: dict[str, str | list[str]] = {
        "prefect.resource.role": "flow",
        "prefect.resource.name": [RUN_FLOW, JOB_FLOW],
    }

    def send(subject: str, body: str) -> SendNotification:
        return SendNotification(block_document_id=block, subject=subject, body=body)

    triggers: dict[Condition, tuple[str, EventTrigger, SendNotification]] = {
        "waiting": (
            "a run waits for an answer",
            EventTrigger(expect={"nexusflow.suspension.requested"}, match=session, posture=Posture.Reactive),
            send(
                "nexusflow: {{ event.resource.name }} waits for an answer",
                "{{ event.payload.prompt }} (tool {{ event.payload.tool }}); "
                "{% if event.payload.answer %}answer with: {{ event.payload.answer }}"
                "{% else %}an event or a condition answers it{% endif %}" + _LINK,
            ),
        ),
        "failed": (
            "a run failed",
            EventTrigger(
                expect={"nexusflow.run.failed"},
                match={**session, "nexusflow.announced": "no"},
                posture=Posture.Reactive,
            ),
            send("nexusflow: {{ event.resource.name }} failed", "{{ event.payload.error }}" + _LINK),
        ),
        "crashed": (
            "a run crashed",
            EventTrigger(
                expect={"prefect.flow-run.Crashed"},
                match={"prefect.resource.id": "prefect.flow-run.*"},
                match_related=holders,
                posture=Posture.Reactive,
            ),
            send(
                "nexusflow: {{ event.resource.name }} crashed",
                "{{ event.payload.validated_state.message or 'crashed' }}" + _LINK,
            ),
        ),
        "quota": (
            "a quota is spent",
            EventTrigger(expect={"nexusflow.quota.exhausted"}, match=session, posture=Posture.Reactive),
            send(
                "nexusflow: {{ event.payload.style }} quota spent",
                "{{ event.payload.error }}; resets at {{ event.payload.resets_at or 'a time it did not say' }}; "
                "session {{ event.resource.name }}: {{ event.payload.then }}" + _LINK,
            ),
        ),
        "auth": (
            "a login is required",
            EventTrigger(expect={"nexusflow.auth.required"}, match=session, posture=Posture.Reactive),
            send(
                "nexusflow: {{ event.payload.style }} needs a login",
                "{{ event.payload.error }}; session {{ event.resource.name }}" + _LINK,
            ),
        ),
        "canary": (
            "the styles canary finds a CLI drifted",
            EventTrigger(
                expect={"prefect.flow-run.Failed", "prefect.flow-run.Crashed"},
                match={"prefect.resource.id": "prefect.flow-run.*"},
                match_related={"prefect.resource.role": "flow", "prefect.resource.name": CANARY_FLOW},
                posture=Posture.Reactive,
            ),
            send(
                "nexusflow: styles canary {{ event.resource.name }} failed",
                "{{ event.payload.validated_state.message or 'failed' }}" + _LINK,
            ),
        ),
        "late": (
            f"a scheduled run has not started {shown_duration(late)} after it was due",
            EventTrigger(
                after={"prefect.flow-run.Late"},
                expect={"prefect.flow-run.*"},
                for_each={"prefect.resource.id"},
                match={"prefect.resource.id": "prefect.flow-run.*"},
                match_related={"prefect.resource.role": "flow", "prefect.resource.name": list(DEPLOYED_FLOWS)},
                posture=Posture.Proactive,
                within=late,
            ),
            send(
                "nexusflow: {{ flow_run.name }} has not started",
                "due at {{ flow_run.expected_start_time }}, still {{ flow_run.state_name }} "
                f"{shown_duration(late)} after Prefect marked it late: is a worker up for its pool?" + _LINK,
            ),
        ),
        "stalled": (
            f"a run made no progress for {shown_duration(stalled)}",
            EventTrigger(
                after={"prefect.task-run.Running"},
                expect={"prefect.task-run.*", STEP_CRASHED},  # a crashed step is told crashed, not stalled
                for_each={"prefect.resource.id"},
                # a wait for a person is no stall: the "waiting" alert tells it
                match={"prefect.resource.id": "prefect.task-run.*", "prefect.resource.name": "!wait-*"},
                match_related=holders,
                posture=Posture.Proactive,
                within=stalled,
            ),
            send(
                "nexusflow: {{ flow_run.name }} made no progress for " + shown_duration(stalled),
                "step {{ event.resource.name }} has run since {{ event.occurred }} with nothing new" + _LINK,
            ),
        ),
    }
    return {
        condition: AutomationCore(
            name=PREFIX + condition,
            description=f"nexusflow: notify when {about}",
            tags=[TAG],
            trigger=trigger,
            actions=[action],
        )
        for condition, (about, trigger, action) in triggers.items()
    }


async def _block(client: PrefectClient, notify: str) -> UUID:
    kind, _, name = notify.partition("/")
    try:
        document = await client.read_block_document_by_name(name, kind, include_secrets=False)
    except ObjectNotFound:
        raise alerts_no_block(notify) from None
    schema = document.block_schema
    if schema is None or "notify" not in schema.capabilities:
        raise alerts_not_notifying(notify)
    return document.id


async def _ours(client: PrefectClient) -> list[Automation]:
    """Asked by tag: a server's first page of every Automation might not hold them all."""
    tagged = AutomationFilter(tags=AutomationFilterTags(all_=[TAG]))
    return [a for a in await client.read_automations(automations=tagged) if a.name.startswith(PREFIX)]


async def install_alerts(
    notify: str, *, late: timedelta | str = LATE, stalled: timedelta | str = STALLED
) -> list[Alert]:
    """Create or update nexusflow's alerts, sending through the notification block
    ``notify`` (``<block type>/<name>``, e.g. ``custom-webhook/night-alerts``): installed
    twice, the same set, updated in place. A block that is missing or cannot notify is
    refused before anything changes (``AlertsError``)."""
    late, stalled = bound("late", late), bound("stalled", stalled)
    if not isinstance(notify, str) or not _SLUG.match(notify):
        raise alerts_bad_block(notify)
    use_server()
    async with get_client() as client:
        block = await _block(client, notify)
        wanted = _automations(block, late, stalled)
        found: dict[str, list[Automation]] = {}
        for automation in await _ours(client):
            found.setdefault(automation.name, []).append(automation)
        for core in wanted.values():
            existing = found.pop(core.name, [])
            if existing:
                await client.update_automation(existing[0].id, core)
            else:
                await client.create_automation(core)
            for extra in existing[1:]:  # two installs that raced
                await client.delete_automation(extra.id)
        for left in found.values():  # a condition this version no longer has
            for gone in left:
                await client.delete_automation(gone.id)
    return await list_alerts()


async def list_alerts() -> list[Alert]:
    """nexusflow's alerts on the Prefect server, in the order of ``CONDITIONS``."""
    use_server()
    async with get_client() as client:
        ours = await _ours(client)
        blocks: dict[UUID, str | None] = {}
        alerts = []
        for automation in ours:
            block = next((a.block_document_id for a in automation.actions if isinstance(a, SendNotification)), None)
            if block is not None and block not in blocks:
                try:
                    document = await client.read_block_document(block, include_secrets=False)
                    kind = document.block_type.slug if document.block_type else "?"
                    blocks[block] = f"{kind}/{document.name}"
                except ObjectNotFound:
                    blocks[block] = None
            trigger = automation.trigger
            proactive = isinstance(trigger, EventTrigger) and trigger.posture == Posture.Proactive
            alerts.append(
                Alert(
                    condition=automation.name.removeprefix(PREFIX),
                    name=automation.name,
                    automation_id=automation.id,
                    enabled=automation.enabled,
                    notify=blocks.get(block) if block is not None else None,
                    within=trigger.within if proactive and isinstance(trigger, EventTrigger) else None,
                )
            )
    order: dict[str, int] = {condition: index for index, condition in enumerate(CONDITIONS)}
    return sorted(alerts, key=lambda alert: (order.get(alert.condition, len(order)), alert.name))


async def remove_alerts() -> list[Alert]:
    """Delete nexusflow's alerts (and no other Automation); returns what was removed."""
    removed = await list_alerts()
    async with get_client() as client:
        for alert in removed:
            try:
                await client.delete_automation(alert.automation_id)
            except ObjectNotFound:  # removed meanwhile by another call
                pass
    return removed


def install_alerts_sync(
    notify: str, *, late: timedelta | str = LATE, stalled: timedelta | str = STALLED
) -> list[Alert]:
    """``install_alerts`` for code without an event loop."""
    return run_coro_as_sync(install_alerts(notify, late=late, stalled=stalled))


def list_alerts_sync() -> list[Alert]:
    """``list_alerts`` for code without an event loop."""
    return run_coro_as_sync(list_alerts())


def remove_alerts_sync() -> list[Alert]:
    """``remove_alerts`` for code without an event loop."""
    return run_coro_as_sync(remove_alerts())
