"""What a run's flow run shows beside its task runs: the transcript, a summary (every step
and the metrics) and a progress bar, as Prefect artifacts keyed by the session."""

from __future__ import annotations

import time
from uuid import UUID

import anyio
from prefect.artifacts import acreate_markdown_artifact, acreate_progress_artifact, aupdate_progress_artifact

from .._artifact_keys import artifact_key
from .._secrets import redact
from ..messages import AssistantMessage, Message, RunResult, SystemMessage, ToolMessage, UserMessage
from .steps import StepEntry


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
        group.start_soon(_markdown, artifact_key("transcript", session_id), transcript(result.messages), "Transcript")
        group.start_soon(_markdown, artifact_key("summary", session_id), summary(result, entries), "Steps and metrics")


async def _markdown(key: str, markdown: str, description: str) -> None:
    await acreate_markdown_artifact(key=key, markdown=redact(markdown), description=f"{description} of the agent run")


class Progress:
    """The run's progress artifact, turns done of ``max_turns``, for watching a run as it
    goes. Written after a turn at most every ``interval`` seconds (the first time a second
    into the run), so a run of instant turns pays no API call per turn; the last word is
    written when the run ends. A run over within its first second never shows one: its
    summary says the same, and a short run at scale saves the request."""

    def __init__(self, session_id: str, max_turns: int, interval: float = 1.0) -> None:
        self.key = artifact_key("progress", session_id)
        self.max_turns = max_turns
        self.interval = interval
        self.artifact: UUID | None = None
        self.updated = time.monotonic()

    async def turn_done(self, turns: int) -> None:
        if time.monotonic() - self.updated >= self.interval:
            await self._show(100 * turns / self.max_turns, self._say(turns))

    async def waiting(self, turns: int, until: str) -> None:
        """Said at once, whatever the interval: the run is idle until ``until``."""
        await self._show(100 * turns / self.max_turns, f"{self._say(turns)}, waiting for the quota until {until}")

    async def finish(self, result: RunResult) -> None:
        if self.artifact is None and time.monotonic() - self.updated < self.interval:
            return
        turns = result.metrics.turns
        percent = 100.0 if result.status == "completed" else 100 * turns / self.max_turns
        await self._show(percent, f"{self._say(turns)}, {result.status}")

    async def _show(self, percent: float, description: str) -> None:
        if self.artifact is None:
            self.artifact = await acreate_progress_artifact(percent, key=self.key, description=description)
        else:
            await aupdate_progress_artifact(self.artifact, percent, description=description)
        self.updated = time.monotonic()

    def _say(self, turns: int) -> str:
        return f"{turns} of at most {self.max_turns} turns"
