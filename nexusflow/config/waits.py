"""Built-in ``wait_for``: how a run gets the answer to a suspended call.

Any async callable ``Request -> Answer`` is a ``wait_for``; these are the ones Prefect
makes natural. Each runs as the run's ``wait-{n}-{tool}`` step, whose answer is persisted,
so a resumed run never asks twice.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import anyio
from anyio.abc import TaskGroup
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.events import Event
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import EventAnyResourceFilter, EventFilter, EventNameFilter, EventOccurredFilter
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import apause_flow_run, aresume_flow_run, asuspend_flow_run
from prefect.input import RunInput
from prefect.input.actions import aread_flow_run_input
from prefect.input.run_input import keyset_from_paused_state
from prefect.logging.loggers import flow_run_logger
from prefect.settings import get_current_settings
from prefect.states import Running, Suspended
from pydantic import Field

from .._prefect.logs import FLOW_RUNS, add_filter
from .._support.secrets import redact
from ..messages import Answer, Request
from .settings import Wait


class AnswerForm(RunInput):
    """The form a person fills in, in the Prefect UI or with ``nexusflow answer``. The
    decision has no default, so submitting the form untouched is refused, never a deny."""

    decision: Literal["approve", "deny"] = Field(description="Approve: the call goes on. Deny: the model is told no.")
    data: str = Field(default="", description="Optional JSON handed to the tool with the answer.")
    reason: str = Field(default="", description="Optional: why.")

    @property
    def approve(self) -> bool:
        """Whether the decision is to approve (the form's field until ``decision`` replaced it)."""
        return self.decision == "approve"

    def to_answer(self, request_id: str) -> Answer:
        data = json.loads(self.data) if self.data.strip() else None
        return Answer(id=request_id, ok=self.approve, data=data, reason=self.reason or None)


def describe_request(request: Request) -> str:
    """The markdown shown above the form."""
    lines = [f"### {request.kind.capitalize()} needed", "", request.prompt, ""]
    if request.tool:
        lines.append(f"- **Tool:** `{request.tool}`")
    if request.arguments:
        lines.append(f"- **Arguments:** `{request.arguments}`")
    if request.url:
        lines.append(f"- **Link:** {request.url}")
    lines.append(f"- **Request:** `{request.id}`")
    return "\n".join(lines)


def _form(request: Request) -> type[AnswerForm]:
    return AnswerForm.with_initial_data(description=describe_request(request))


def _flow_run_page(flow_run_id: str) -> str:
    """Where to answer in the Prefect UI: the flow run's page (its address when the UI's
    is known; an ephemeral server has none)."""
    ui_url = get_current_settings().ui_url
    page = "the flow run's page in the Prefect UI"
    return f"{page} ({ui_url}/runs/flow-run/{flow_run_id})" if ui_url else page


class _WaitsAreNotErrors(logging.Filter):
    """Prefect's async flow engine logs ``Finished in state Suspended(...)`` (or
    ``Paused``) at ERROR, as for any state that is not Completed; a run waiting for an
    answer is healthy, so exactly that line is lowered to INFO."""

    finished = re.compile(r"Finished in state (Suspended|Paused|AwaitingAnswer)\(")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO and self.finished.match(str(record.msg)):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_waits_are_not_errors = _WaitsAreNotErrors()


def waiting_is_no_error() -> None:
    """Keep Prefect's closing line of a run that ends waiting at INFO."""
    add_filter(_waits_are_not_errors, FLOW_RUNS)


def answer_hint(flow_run_id: str) -> str:
    """The command that answers a paused or suspended flow run: one text for the run's log
    and its events, so the two never disagree."""
    return f"nexusflow answer {flow_run_id} --approve|--deny"


def _announce(request: Request) -> None:
    """Say in the flow run's log, at INFO, how to answer, and keep Prefect's closing line
    of a suspended run at INFO too."""
    waiting_is_no_error()
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    flow_run_id = str(context.flow_run.id)
    flow_run_logger(context.flow_run).info(
        "waiting for an answer to %s (request %s): approve or deny it on %s, or run: %s",
        redact(request.prompt),
        request.id,
        _flow_run_page(flow_run_id),
        answer_hint(flow_run_id),
    )


def _pause_key(request: Request) -> str:
    """Prefect's input keys take only lowercase letters, digits and dashes."""
    return "nexusflow-" + hashlib.sha256(request.id.encode()).hexdigest()[:20]


class PrefectPause:
    """Pause the flow run with an ``AnswerForm``; answered in the UI or with
    ``nexusflow answer <flow-run-id> --approve``. The process waits (polling every
    ``poll_interval`` seconds); after ``timeout`` the answer is ``expired``."""

    def __init__(self, timeout: float = 3600, poll_interval: float = 5) -> None:
        self.timeout = timeout
        self.poll_interval = poll_interval

    async def __call__(self, request: Request) -> Answer:
        _announce(request)
        try:
            form = await apause_flow_run(
                wait_for_input=_form(request),
                timeout=max(1, round(self.timeout)),
                poll_interval=max(1, round(self.poll_interval)),
                key=_pause_key(request),
            )
        except FlowPauseTimeout:
            await _running_again()
            return Answer(id=request.id, ok=False, reason="expired")
        assert isinstance(form, AnswerForm)
        return form.to_answer(request.id)


async def _running_again() -> None:
    """An expired pause leaves the run Paused on the server, which would fail it at the
    end; the run goes on (the model hears ``expired``), so it is Running again."""
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    async with get_client() as client:
        await client.set_flow_run_state(context.flow_run.id, Running(), force=True)


class DeploymentSuspension:
    """For runs of a deployment: suspend the flow run, so the process exits; answering it
    (UI or ``nexusflow answer``) reschedules the run, which replays its finished steps and
    goes on with the answer. Runs in the flow itself (Prefect cannot suspend from a task)."""

    in_flow = True

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout

    async def __call__(self, request: Request) -> Answer:
        answered = await _given_answer(request)
        if answered is not None:  # the run resumed with its answer: no second "waiting" in its log
            return answered.to_answer(request.id)
        _announce(request)
        form = await asuspend_flow_run(
            wait_for_input=_form(request),
            timeout=round(self.timeout) if self.timeout else None,
            key=_pause_key(request),
        )
        assert isinstance(form, AnswerForm)
        return form.to_answer(request.id)


async def _given_answer(request: Request) -> AnswerForm | None:
    """The answer a resumed run was given, read where Prefect keeps a suspension's input;
    None before it is given. Prefect would log "Suspending flow run" again before it found it."""
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return None
    keyset = keyset_from_paused_state(Suspended(pause_key=_pause_key(request)))
    value = await aread_flow_run_input(keyset["response"], flow_run_id=context.flow_run.id)
    if value is None:
        return None
    form = _form(request)(**value)
    assert isinstance(form, AnswerForm)
    return form


class EventWait:
    """Answer yes when a Prefect event named ``event`` (about ``resource``, if given)
    occurs, including one that occurred up to ``lookback`` seconds before the wait began;
    the answer's data is the event's payload. ``expired`` after ``timeout``.

    Events are read from the live stream and, every ``recheck`` seconds, from the stored
    history: an event the server received just before the wait began may reach neither the
    stream (already passed) nor the history (not yet written) at the first look."""

    def __init__(
        self, event: str, resource: str | None = None, timeout: float = 3600, lookback: float = 300, recheck: float = 2
    ) -> None:
        self.event = event
        self.resource = resource
        self.timeout = timeout
        self.lookback = lookback
        self.recheck = recheck

    def _filter(self) -> EventFilter:
        # Filtering the primary resource id is ignored by the stream's backfill; any_resource
        # works there, and _about keeps the match exact.
        return EventFilter(
            event=EventNameFilter(name=[self.event]),
            any_resource=EventAnyResourceFilter(id=[self.resource]) if self.resource else None,
        )

    def _about(self, event: Event) -> bool:
        if self.resource is None:
            return True
        return event.resource.id == self.resource or any(r.id == self.resource for r in event.related)

    async def __call__(self, request: Request) -> Answer:
        found: list[Event] = []
        since = datetime.now(UTC) - timedelta(seconds=self.lookback)

        async def listen(group: TaskGroup) -> None:
            async with get_events_subscriber(filter=self._filter()) as subscriber:
                async for event in subscriber:
                    if self._about(event):
                        found.append(event)
                        group.cancel_scope.cancel()

        async def look_back(group: TaskGroup) -> None:
            history = self._filter()
            history.occurred = EventOccurredFilter(since=since)  # type: ignore[arg-type]
            async with get_client() as client:
                while True:
                    page = await client.read_events(filter=history, limit=50)
                    matching = [event for event in page.events if self._about(event)]
                    if matching:
                        found.append(matching[0])
                        group.cancel_scope.cancel()
                    await anyio.sleep(self.recheck)

        with anyio.move_on_after(self.timeout):
            async with anyio.create_task_group() as group:
                group.start_soon(listen, group)
                group.start_soon(look_back, group)
        if found:
            return Answer(id=request.id, ok=True, data=found[0].payload or None)
        return Answer(id=request.id, ok=False, reason="expired")


Condition = Callable[[Request], "bool | Answer | Awaitable[bool | Answer | None] | None"]


class Polling:
    """Ask ``condition(request)`` every ``interval`` seconds: true (or an ``Answer``) ends
    the wait; after ``timeout`` the answer is ``expired``."""

    def __init__(self, condition: Condition, interval: float = 30, timeout: float = 3600) -> None:
        self.condition = condition
        self.interval = interval
        self.timeout = timeout

    async def __call__(self, request: Request) -> Answer:
        deadline = time.monotonic() + self.timeout
        while True:
            value: Any = self.condition(request)
            if inspect.isawaitable(value):
                value = await value
            if isinstance(value, Answer):
                return value
            if value:
                return Answer(id=request.id, ok=True)
            if time.monotonic() + self.interval > deadline:
                return Answer(id=request.id, ok=False, reason="expired")
            await anyio.sleep(self.interval)


async def answer_flow_run(flow_run_id: str, *, approve: bool, data: Any = None, reason: str | None = None) -> None:
    """Answer a paused or suspended run from any process (what ``nexusflow answer`` does)."""
    run_input = {
        "decision": "approve" if approve else "deny",
        "data": json.dumps(data) if data is not None else "",
        "reason": reason or "",
    }
    await aresume_flow_run(UUID(flow_run_id), run_input=run_input)


def policy_wait(wait: Wait, timeout: float) -> PrefectPause | DeploymentSuspension | None:
    """The built-in ``wait_for`` an answer policy names (``NEXUSFLOW_WAIT``, ``agent_job``'s
    ``wait``); ``none`` is no ``wait_for``: the run ends ``pending``."""
    if wait == "suspend":
        return DeploymentSuspension(timeout=timeout)
    if wait == "pause":
        return PrefectPause(timeout=timeout)
    return None
