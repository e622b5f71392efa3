"""One model turn: one ``session/prompt``, bounded by the timeout (then ``session/cancel``,
a grace period and the process group killed), held open a quiet period for late updates,
and the served tool calls made during it, counted and turned into steps."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from ...errors import AcpError, AcpTransientError, QuotaExhausted, RemoteError
from ...messages import (
    AssistantMessage,
    Message,
    ModelReply,
    ModelRequest,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    TurnStats,
    Usage,
    UserMessage,
)
from ...state.events import ToolCallFinished, ToolCallStarted
from ...state.suspension import Suspended
from ..base import TurnScope
from ..errors import acp_exited_during_turn, acp_prompt_failed, acp_turn_timed_out
from ..retry_on import retry_matches
from ..subscription import spent_quota
from .auth import not_logged_in
from .connection import Connection, as_object

if TYPE_CHECKING:
    from .config import AcpConfig
    from .permissions import Permissions
    from .process import AgentProcess
    from .session import Session

logger = logging.getLogger("nexusflow.acp")

KNOWN_STOP_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}


def text_of(content: Any) -> str:
    if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
        return str(content["text"])
    return ""


def prompt_text(messages: list[Message], whole: bool) -> str:
    """What the agent has not seen yet: everything for a fresh session, else what follows
    the last assistant message."""
    if not whole:
        last = max((i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)), default=-1)
        messages = messages[last + 1 :]
    parts: list[str] = []
    for message in messages:
        if isinstance(message, SystemMessage | UserMessage):
            parts.append(message.content)
        elif isinstance(message, AssistantMessage) and message.content:
            parts.append(f"(your earlier answer) {message.content}")
        elif isinstance(message, ToolMessage):
            parts.append(f"(tool result {message.tool_call_id}) {message.content}")
    return "\n\n".join(parts)


OUTPUT = """

Your final answer must be JSON that matches this JSON schema, and nothing else: {schema}"""


def output_instruction(request: ModelRequest) -> str:
    """The run's output schema, verbatim, in every prompt: an agent has no response_format,
    and a repair prompt must carry it as much as the first."""
    schema = request.output_schema
    return "" if schema is None else OUTPUT.format(schema=json.dumps(schema, ensure_ascii=False))


@dataclass
class Turn:
    scope: TurnScope
    text: list[str] = field(default_factory=list)
    steps: list[Message] = field(default_factory=list)
    stats: TurnStats = field(default_factory=TurnStats)
    seen: dict[str, int] = field(default_factory=dict)
    suspended: Suspended | None = None
    stop: anyio.Event = field(default_factory=anyio.Event)
    cost_before: float = 0.0
    """The session's cumulative cost (USD) when the turn began."""
    costs: list[float] = field(default_factory=list)
    """The session's cumulative cost as each ``usage_update`` of the turn stated it."""
    model: str | None = None

    def position(self, name: str, arguments: dict[str, Any]) -> tuple[int, str]:
        """The n-th call with this name and these arguments in the turn, and an id made
        from them: a resumed turn finds its finished calls however parallel calls interleave."""
        digest = hashlib.sha256(json.dumps([name, arguments], sort_keys=True).encode()).hexdigest()[:8]
        occurrence = self.seen.get(digest, 0)
        self.seen[digest] = occurrence + 1
        return occurrence, f"served_{self.scope.step}_{digest}_{occurrence}"

    def reply(self, answer: Any) -> ModelReply:
        reply = as_object(answer)
        stop = reply.get("stopReason")
        stop_reason = stop if isinstance(stop, str) else None
        if stop_reason not in KNOWN_STOP_REASONS:
            logger.info("acp: the turn ended with an unknown stop reason %r", stop)
        self.stats.stop_reason = stop_reason
        self.stats.streamed = True
        return ModelReply(content="".join(self.text), usage=self.usage(reply), stats=self.stats, steps=self.steps)

    def usage(self, reply: dict[str, Any]) -> Usage:
        """The turn's tokens from the prompt response's ``usage`` (absent figures unknown);
        its cost from the session's cumulative cost, before the turn and at its end."""
        figures = as_object(reply.get("usage"))

        def count(name: str) -> int | None:
            value = figures.get(name)
            return value if isinstance(value, int) and value >= 0 else None

        cost = max(self.costs[-1] - self.cost_before, 0.0) if self.costs else None
        return Usage(
            input_tokens=count("inputTokens"),
            output_tokens=count("outputTokens"),
            cache_read_tokens=count("cachedReadTokens"),
            cache_write_tokens=count("cachedWriteTokens"),
            cost_usd=cost,
            model=self.model,
        )


class Turns:
    """Runs the session's turns one at a time; ``current`` is the turn under way, if any."""

    def __init__(
        self, config: AcpConfig, agent: AgentProcess, permissions: Permissions, updates: list[dict[str, Any]]
    ) -> None:
        self.config = config
        self.current: Turn | None = None
        self._agent = agent
        self._permissions = permissions
        self._updates = updates
        """Every update of the session: the quiet period watches it grow."""
        self._has_prompted = False
        self._cost = 0.0
        """The session's cumulative cost after the last turn that stated one."""

    async def generate(
        self, connection: Connection, group: TaskGroup, session: Session, request: ModelRequest, scope: TurnScope | None
    ) -> ModelReply:
        seeding, first = session.seed, not self._has_prompted
        # A reopened session's agent has seen the turns before: it is asked what follows them,
        # as the run that recorded them asked it.
        whole = seeding or (first and not session.reopened)
        text = prompt_text(request.messages, whole=whole) + output_instruction(request)
        turn = self.current = Turn(scope=scope or TurnScope(step=0), cost_before=self._cost)
        self._has_prompted = True
        done = anyio.Event()
        outcome: dict[str, Any] = {}

        async def prompt() -> None:
            try:
                outcome["reply"] = await connection.request(
                    "session/prompt", {"sessionId": session.id, "prompt": [{"type": "text", "text": text}]}
                )
            except Exception as exc:
                outcome["error"] = exc
            finally:
                done.set()

        group.start_soon(prompt)
        timed_out = False
        try:
            with anyio.move_on_after(self.config.timeout):
                await _first_of(done, turn.stop)
            timed_out = turn.suspended is None and not done.is_set()
        finally:
            if not done.is_set():
                with anyio.CancelScope(shield=True):
                    await self._cancel(connection, session, done)
            session.seed = False
        if timed_out:
            self.current = None
            stop = as_object(outcome.get("reply")).get("stopReason")
            raise acp_turn_timed_out(round(self.config.timeout * 1000), stop)
        if turn.suspended is not None:
            self.current = None
            raise turn.suspended
        if "error" in outcome:
            self.current = None
            error = outcome["error"]
            if connection.broken is not None and error is connection.broken:  # we stopped reading it: the agent goes
                self._agent.kill()
                raise connection.broken
            if isinstance(error, AcpError) and not isinstance(error, RemoteError):
                detail = await self._agent.exit_detail(connection)
                raise acp_exited_during_turn(detail) from error
            failure = error if isinstance(error, AcpError) else acp_prompt_failed(error)
            if (login := not_logged_in(self.config.style, failure)) is not None:
                raise login from error  # never retried: see AuthRequired
            spent = _spent(self.config.style.name, failure)
            if spent is not None:
                raise spent from error
            if retry_matches(self.config.retry_on, str(failure)):
                # The agent refused the prompt: a retry sends it again as it was sent.
                session.seed, self._has_prompted = seeding, not first
                raise AcpTransientError(str(failure)) from error
            raise failure
        await self._await_quiet()
        self.current = None
        reply = turn.reply(outcome.get("reply"))
        if turn.costs:
            self._cost = turn.costs[-1]
        return reply

    async def _await_quiet(self) -> None:
        """Let updates the agent sent just after its response join the turn."""
        deadline = time.monotonic() + 10 * self.config.quiet_period
        while time.monotonic() < deadline:
            seen = len(self._updates)
            await anyio.sleep(self.config.quiet_period)
            if len(self._updates) == seen:
                return

    async def _cancel(self, connection: Connection, session: Session, done: anyio.Event) -> None:
        self._permissions.cancelling = True
        try:
            try:
                await connection.notify("session/cancel", {"sessionId": session.id})
            except AcpError:
                pass
            with anyio.move_on_after(self.config.cancel_grace):
                await done.wait()
            if not done.is_set():
                self._agent.kill()
        finally:
            self._permissions.cancelling = False

    async def call_served(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """A call of the served toolkit: run as the turn's ``call_tool`` (the flow's keyed tool task)."""
        turn = self.current
        call_tool = turn.scope.call_tool if turn is not None else None
        if turn is None or call_tool is None:
            return ToolResult(content=f'error: tool "{name}" was called outside a turn', is_error=True)
        scope = turn.scope
        index, call_id = turn.position(name, arguments)
        call = ToolCall.model_validate({"id": call_id, "name": name, "arguments": arguments})
        if scope.emit:
            scope.emit(ToolCallStarted(step=scope.step, call=call))
        started = time.perf_counter()
        try:
            outcome = await call_tool(index, call)
        except Suspended as exc:
            # No wait_for: the run must end pending, so this turn ends here; the resumed run
            # reopens the agent's session and finds this call answered.
            turn.suspended = exc
            turn.stop.set()
            return pending_result(exc.request.prompt)
        turn.stats.tool_calls += 1
        turn.stats.tool_errors += outcome.result.is_error
        turn.stats.suspensions += outcome.suspended
        if outcome.replayed:
            turn.stats.replayed_tool_calls += 1
        else:
            turn.stats.tool_seconds += time.perf_counter() - started
        turn.steps += [
            AssistantMessage(tool_calls=[call]),
            ToolMessage(tool_call_id=call.id, content=outcome.result.content),
        ]
        if scope.emit:
            scope.emit(ToolCallFinished(step=scope.step, call=call, result=outcome.result))
        return outcome.result


def pending_result(prompt: str) -> ToolResult:
    """What the agent is told of a call that suspended: the run ends pending, and its turn with it."""
    return ToolResult(content=f"pending: {prompt} (the turn ends until it is answered)", is_error=True)


async def _first_of(*events: anyio.Event) -> None:
    async def wait(event: anyio.Event, scope: anyio.CancelScope) -> None:
        await event.wait()
        scope.cancel()

    async with anyio.create_task_group() as group:
        for event in events:
            group.start_soon(wait, event, group.cancel_scope)


def _spent(style: str, failure: AcpError) -> QuotaExhausted | None:
    """A prompt the agent refused because its quota is spent: the error's message, or its
    ``data.message`` (codex-acp says only "Internal error" and puts the words there)."""
    if not isinstance(failure, RemoteError):
        return None
    data = failure.data if isinstance(failure.data, dict) else {}
    said = " ".join(part for part in (str(failure), data.get("message")) if isinstance(part, str))
    quota = spent_quota(said)
    return QuotaExhausted(style, quota.resets_at, said) if quota is not None else None
