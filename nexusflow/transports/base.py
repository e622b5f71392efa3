"""What every transport provides: one model turn from one request.

A transport is a resource the flow opens for the run (a warm process, a session), never a
task argument: a live process cannot be hashed or persisted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from ..messages import ModelReply, ModelRequest


class ModelTransport(Protocol):
    async def generate(self, request: ModelRequest) -> ModelReply: ...


TransportFactory = Callable[[], AbstractAsyncContextManager[ModelTransport]]
"""Opens a transport for one run; the flow enters it and closes it when the run ends."""


Remember = Callable[[str, dict[str, object], Callable[[], Awaitable[str]]], Awaitable[tuple[str, bool]]]
"""(kind, inputs, produce) -> (value, replayed): a value persisted under the run's session,
produced once and found again when the session resumes in a new flow run."""


@runtime_checkable
class SessionTransport(Protocol):
    """A transport holding a session of its own (ACP): told once per flow run, before the
    first turn, so it can open or resume that session."""

    async def begin(self, remember: Remember) -> None: ...
