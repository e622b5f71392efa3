"""The live objects of a run, reached through context variables.

Prefect tasks take only data (so they can be keyed and persisted); the client, the
toolkit and the open transport travel beside them here.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import NoRuntimeError

if TYPE_CHECKING:
    from .client import Client, ClientOptions
    from .events import Emit
    from .toolkit import Toolkit
    from .transports import ModelTransport


@dataclass(frozen=True)
class PendingRun:
    """Set by ``Client.run`` for the ``agent_run`` flow it starts."""

    client: Client
    toolkit: Toolkit
    emit: Emit | None = None


@dataclass(frozen=True)
class ActiveRun:
    """Set by the flow, once the transport is open, for the tasks it runs."""

    options: ClientOptions
    toolkit: Toolkit
    transport: ModelTransport


pending_run: ContextVar[PendingRun] = ContextVar("nexusflow_pending_run")
active_run: ContextVar[ActiveRun] = ContextVar("nexusflow_active_run")


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
