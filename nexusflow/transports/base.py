"""What every transport provides: one model turn from one request.

A transport is a resource the flow opens for the run (a warm process, a session), never a
task argument: a live process cannot be hashed or persisted.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from ..messages import ModelReply, ModelRequest


class ModelTransport(Protocol):
    async def generate(self, request: ModelRequest) -> ModelReply: ...


TransportFactory = Callable[[], AbstractAsyncContextManager[ModelTransport]]
"""Opens a transport for one run; the flow enters it and closes it when the run ends."""
