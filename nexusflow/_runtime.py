"""The live objects of a run, reached through context variables.

Prefect tasks take only data (so they can be keyed and persisted); the client, the
toolkit and the open transport travel beside them here.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import NoRuntimeError

if TYPE_CHECKING:
    from .client import Client, ClientOptions
    from .events import Emit
    from .messages import Answer, ToolCall
    from .tasks import ToolRecord
    from .toolkit import Toolkit
    from .transports import ModelTransport

RunTool = Callable[[int, int, "ToolCall"], Coroutine[object, object, tuple["ToolRecord", bool]]]
"""(step, index, call) -> (record, replayed): a tool call as a keyed Prefect task."""


@dataclass(frozen=True)
class PendingRun:
    """Set by ``Client.run`` for the ``agent_run`` flow it starts."""

    client: Client
    toolkit: Toolkit
    emit: Emit | None = None
    answers: dict[str, Answer] = field(default_factory=dict)


@dataclass(frozen=True)
class ActiveRun:
    """Set by the flow, once the transport is open, for the tasks and the transport.
    ``run_tool`` lets a transport whose agent calls tools itself (ACP) run each call as
    the same keyed task the loop would."""

    options: ClientOptions
    toolkit: Toolkit
    transport: ModelTransport
    session_id: str = ""
    run_tool: RunTool | None = None
    emit: Emit | None = None


pending_run: ContextVar[PendingRun] = ContextVar("nexusflow_pending_run")
active_run: ContextVar[ActiveRun] = ContextVar("nexusflow_active_run")
current_step: ContextVar[int] = ContextVar("nexusflow_current_step", default=0)
"""The step of the model turn being produced, set inside the turn task."""


def current_pending() -> PendingRun:
    try:
        return pending_run.get()
    except LookupError:
        raise NoRuntimeError() from None


def current_active() -> ActiveRun:
    try:
        return active_run.get()
    except LookupError:
        raise NoRuntimeError() from None
