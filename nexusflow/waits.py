"""Built-in ``wait_for``: how a run gets the answer to a suspended call.

Any async callable ``Request -> Answer`` is a ``wait_for``; these are the ones Prefect
makes natural. Each runs as the run's ``wait-{n}-{tool}`` step, whose answer is persisted,
so a resumed run never asks twice.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import anyio
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import EventFilter, EventNameFilter, EventOccurredFilter, EventResourceFilter
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import apause_flow_run, aresume_flow_run, asuspend_flow_run
from prefect.input import RunInput
from pydantic import Field

from .messages import Answer, Request


class AnswerForm(RunInput):
    """The form a person fills in, in the Prefect UI or with ``nexusflow answer``."""

    approve: bool = Field(default=False, description="Let the call go on.")
    data: str = Field(default="", description="Optional JSON handed to the tool with the answer.")
    reason: str = Field(default="", description="Optional: why.")

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
    return AnswerForm.with_initial_data(description=describe_request(request), approve=False)


def _pause_key(request: Request) -> str:
    return f"nexusflow-{request.id}"


class PrefectPause:
    """Pause the flow run with an ``AnswerForm``; answered in the UI or with
    ``nexusflow answer <flow-run-id> --approve``. The process waits (polling every
    ``poll_interval`` seconds); after ``timeout`` the answer is ``expired``."""

    def __init__(self, timeout: float = 3600, poll_interval: float = 5) -> None:
        self.timeout = timeout
        self.poll_interval = poll_interval

    async def __call__(self, request: Request) -> Answer:
        try:
            form = await apause_flow_run(
                wait_for_input=_form(request),
                timeout=max(1, round(self.timeout)),
                poll_interval=max(1, round(self.poll_interval)),
                key=_pause_key(request),
            )
        except FlowPauseTimeout:
            return Answer(id=request.id, ok=False, reason="expired")
        assert isinstance(form, AnswerForm)
        return form.to_answer(request.id)


class DeploymentSuspension:
    """For runs of a deployment: suspend the flow run, so the process exits; answering it
    (UI or ``nexusflow answer``) reschedules the run, which replays its finished steps and
    goes on with the answer. Runs in the flow itself (Prefect cannot suspend from a task)."""

    in_flow = True

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout

    async def __call__(self, request: Request) -> Answer:
        form = await asuspend_flow_run(
            wait_for_input=_form(request),
            timeout=round(self.timeout) if self.timeout else None,
            key=_pause_key(request),
        )
        assert isinstance(form, AnswerForm)
        return form.to_answer(request.id)


class EventWait:
    """Answer yes when a Prefect event named ``event`` (about ``resource``, if given)
    occurs, including one emitted up to ``lookback`` seconds before the wait began; the
    answer's data is the event's payload. ``expired`` after ``timeout``."""

    def __init__(self, event: str, resource: str | None = None, timeout: float = 3600, lookback: float = 300) -> None:
        self.event = event
        self.resource = resource
        self.timeout = timeout
        self.lookback = lookback

    async def __call__(self, request: Request) -> Answer:
        since = datetime.now(UTC) - timedelta(seconds=self.lookback)
        event_filter = EventFilter(
            event=EventNameFilter(name=[self.event]),
            occurred=EventOccurredFilter(since=since),  # type: ignore[arg-type]
            resource=EventResourceFilter(id=[self.resource]) if self.resource else None,
        )
        with anyio.move_on_after(self.timeout):
            async with get_events_subscriber(filter=event_filter) as subscriber:
                async for event in subscriber:
                    return Answer(id=request.id, ok=True, data=event.payload or None)
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
    run_input = {"approve": approve, "data": json.dumps(data) if data is not None else "", "reason": reason or ""}
    await aresume_flow_run(UUID(flow_run_id), run_input=run_input)
