"""What every transport provides: one model turn from one request, and what a turn gives
a transport in return.

A transport is a resource the flow opens for the run (a warm process, a session), never a
task argument: a live process cannot be hashed or persisted. Transports know nothing of
Prefect: the flow wraps what they need (a tool call as a keyed task, a value remembered
across runs) and hands it to them explicitly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..messages import ModelReply, ModelRequest, ToolCall, ToolResult, ToolSpec
from ..state.events import Emit


@dataclass(frozen=True)
class CallOutcome:
    """A tool call made on the agent's behalf: its result, whether it was replayed from an
    earlier run, and whether it was suspended on the way (asked a person)."""

    result: ToolResult
    replayed: bool
    suspended: bool = False


CallTool = Callable[[int, ToolCall], Awaitable[CallOutcome]]
"""(index in the turn, call) -> outcome: the tool call as the flow runs it (keyed, durable).
Raises ``Suspended`` when the call waits for an answer and the run has no ``wait_for``."""


@dataclass(frozen=True)
class TurnScope:
    """What one turn gives its transport: which step it is, how to run a tool call the
    agent makes itself (ACP), and where stream events go."""

    step: int
    call_tool: CallTool | None = None
    emit: Emit | None = None


class ModelTransport(Protocol):
    async def generate(self, request: ModelRequest, scope: TurnScope | None = None) -> ModelReply: ...


Log = Callable[[str], None]


class TransportFactory(Protocol):
    """Opens a transport for one run; the flow enters it and closes it when the run ends.
    ``log`` is where the run's log goes (the flow passes its run logger)."""

    def __call__(self, log: Log | None = None) -> AbstractAsyncContextManager[ModelTransport]: ...


Remember = Callable[[str, dict[str, object], Callable[[], Awaitable[str]]], Awaitable[tuple[str, bool]]]
"""(kind, inputs, produce) -> (value, replayed): a value persisted under the run's session,
produced once and found again when the session resumes in a new flow run."""


@runtime_checkable
class SessionTransport(Protocol):
    """A transport holding a session of its own (ACP): told once per flow run, before the
    first turn, so it can open or resume that session and serve the run's tools."""

    async def begin(self, remember: Remember, tools: list[ToolSpec]) -> None: ...
