"""What a run's flow run shows beside its task runs: the transcript, a summary (every step
and the metrics) and a progress bar, as Prefect artifacts keyed by the session.

They are the UI's view of the run, not its outcome: a write the Prefect API fails on its
passing trouble (a server restarting, a 503 from a busy SQLite server) once Prefect's client
has spent its retries is one INFO line, and the run goes on. Before, a progress write that
met a server down for a minute failed a run whose every step had finished, and ``Client.run``
started it again as a new flow run."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TypeVar
from uuid import UUID

import anyio
from prefect.artifacts import acreate_markdown_artifact, acreate_progress_artifact, aupdate_progress_artifact

from .._prefect.artifact_keys import artifact_key
from .._prefect.retry import is_transient
from .._prefect.server import logger
from .._support.secrets import redact
from ..errors import describe, unwrap
from ..messages import AssistantMessage, Message, RunResult, SystemMessage, ToolMessage, UserMessage
from .steps import StepEntry

ARTIFACT_NOT_TAKEN = "the Prefect server did not take the %s artifact of session %s (%s): the UI will not show it"
PROGRESS_PAUSE = 60.0
"""Seconds a progress bar the API did not take waits before its next write: while the server
is down, each write would hold a turn for Prefect's client retries (about a minute)."""

T = TypeVar("T")


async def _taken(kind: str, session_id: str, write: Awaitable[T]) -> T | None:
    """The artifact written, or ``None`` and one INFO line when the API's passing trouble
    outlasted Prefect's retries; any other failure is raised."""
    try:
        return await write
    except Exception as exc:
        if not is_transient(exc):
            raise
        logger.info(ARTIFACT_NOT_TAKEN, kind, session_id, describe(unwrap(exc)))
        return None


def transcript(messages: list[Message]) -> str:
    lines: list[str] = []
    for message in messages:
        if isinstance(message, SystemMessage | UserMessage):
            lines.append(f"**{message.role}**\n\n{message.content}")
        elif isinstance(message, AssistantMessage):
            calls = "".join(f"\n- `{c.name}({c.arguments})` ({c.id})" for c in message.tool_calls or [])
            lines.append(f"**assistant**\n\n{message.content or ''}{calls}")
        elif isinstance(message, ToolMessage):
            lines.append(f"**tool** ({message.tool_call_id})\n\n```\n{message.content}\n```")
    return "\n\n---\n\n".join(lines)


def _figure(value: int | None) -> str:
    return "?" if value is None else str(value)


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _step(entry: StepEntry) -> str:
    return f"{entry.name} (answered by {entry.answered_by})" if entry.answered_by else entry.name


def summary(result: RunResult, entries: list[StepEntry]) -> str:
    """The step table (in the order steps started), then the run's metrics."""
    rows = [
        f"| {number} | {entry.kind} | {_cell(_step(entry))} | {_cell(entry.status)} | {entry.seconds:.2f} | "
        f"{'yes' if entry.replayed else 'no'} | {_cell(entry.usage.shown()) if entry.usage is not None else ''} |"
        for number, entry in enumerate(entries, 1)
    ]
    metrics = result.metrics
    figures: list[tuple[str, object]] = [
        ("status", result.status),
        ("turns", metrics.turns),
        ("tool calls", metrics.tool_calls),
        ("tool errors", metrics.tool_errors),
        ("suspensions", metrics.suspensions),
        ("replayed turns", metrics.replayed_turns),
        ("replayed tool calls", metrics.replayed_tool_calls),
        ("model seconds", f"{metrics.model_seconds:.2f}"),
        ("tool seconds", f"{metrics.tool_seconds:.2f}"),
        ("launches", metrics.launches),
        ("model retries", metrics.model_retries),
        ("output repairs", metrics.output_repairs),
        ("usage", metrics.usage.shown()),
        (
            "cache read / write tokens",
            f"{_figure(metrics.usage.cache_read_tokens)} / {_figure(metrics.usage.cache_write_tokens)}",
        ),
        ("turns that reported no tokens / no cost", f"{metrics.turns_without_usage} / {metrics.turns_without_cost}"),
        ("replayed usage (not spent again)", metrics.replayed_usage.shown()),
        ("models", ", ".join(metrics.models) or "?"),
    ]
    if result.error:
        figures.append(("error", result.error))
    if result.request is not None:
        figures.append(("waiting for", result.request.prompt))
    return "\n".join(
        [
            f"### Steps of session `{_cell(result.session_id)}`",
            "",
            "| # | kind | step | status | seconds | replayed | usage |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            "### Metrics",
            "",
            "| metric | value |",
            "|---|---|",
            *(f"| {name} | {_cell(value)} |" for name, value in figures),
        ]
    )


async def publish(result: RunResult, entries: list[StepEntry]) -> None:
    """The transcript and summary artifacts of the run as it ended (completed, pending or
    failed), written side by side."""
    session_id = result.session_id
    async with anyio.create_task_group() as group:
        group.start_soon(_markdown, "transcript", session_id, transcript(result.messages), "Transcript")
        group.start_soon(_markdown, "summary", session_id, summary(result, entries), "Steps and metrics")


async def _markdown(kind: str, session_id: str, markdown: str, description: str) -> None:
    written = acreate_markdown_artifact(
        key=artifact_key(kind, session_id), markdown=redact(markdown), description=f"{description} of the agent run"
    )
    await _taken(kind, session_id, written)


class Progress:
    """The run's progress artifact, turns done of ``max_turns``, for watching a run as it
    goes. Written after a turn at most every ``interval`` seconds (the first time a second
    into the run), so a run of instant turns pays no API call per turn; the last word is
    written when the run ends. A run over within its first second never shows one: its
    summary says the same, and a short run at scale saves the request."""

    def __init__(self, session_id: str, max_turns: int, interval: float = 1.0) -> None:
        self.session_id = session_id
        self.key = artifact_key("progress", session_id)
        self.max_turns = max_turns
        self.interval = interval
        self.artifact: UUID | None = None
        self.started = self.updated = time.monotonic()

    async def turn_done(self, turns: int) -> None:
        if time.monotonic() - self.updated >= self.interval:
            await self._show(100 * turns / self.max_turns, self._say(turns))

    async def waiting(self, turns: int, until: str) -> None:
        """Said at once, whatever the interval: the run is idle until ``until``."""
        await self._show(100 * turns / self.max_turns, f"{self._say(turns)}, waiting for the quota until {until}")

    async def finish(self, result: RunResult) -> None:
        if self.artifact is None and time.monotonic() - self.started < self.interval:
            return
        turns = result.metrics.turns
        percent = 100.0 if result.status == "completed" else 100 * turns / self.max_turns
        await self._show(percent, f"{self._say(turns)}, {result.status}")

    async def _show(self, percent: float, description: str) -> None:
        if self.artifact is None:
            created = acreate_progress_artifact(percent, key=self.key, description=description)
            self.artifact = await _taken("progress", self.session_id, created)
            shown = self.artifact is not None
        else:
            updated = aupdate_progress_artifact(self.artifact, percent, description=description)
            shown = await _taken("progress", self.session_id, updated) is not None
        self.updated = time.monotonic() + (0.0 if shown else PROGRESS_PAUSE)

    def _say(self, turns: int) -> str:
        return f"{turns} of at most {self.max_turns} turns"
