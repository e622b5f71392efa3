"""The one hand-over of live objects from ``Client.run`` to the ``agent_run`` flow it
starts: a flow's parameters are data sent to the server, so the client's options,
transport and toolkit cannot be parameters. Below the flow, everything is passed
explicitly."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from .errors import NoRuntimeError
from .events import Emit
from .messages import Answer
from .options import ClientOptions
from .toolkit import Toolkit
from .transports import TransportFactory


@dataclass(frozen=True)
class PendingRun:
    """Set by ``Client.run`` for the ``agent_run`` flow it starts."""

    options: ClientOptions
    transport: TransportFactory
    toolkit: Toolkit
    emit: Emit | None = None
    answers: dict[str, Answer] = field(default_factory=dict)


pending_run: ContextVar[PendingRun] = ContextVar("nexusflow_pending_run")


def current_pending() -> PendingRun:
    try:
        return pending_run.get()
    except LookupError:
        raise NoRuntimeError() from None
