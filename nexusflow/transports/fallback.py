"""The fallback clients of a run (``on_quota="fallback"``): their transports are opened the
first time a spent quota needs them, and closed with the run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime

from ..errors import QuotaExhausted
from .base import Log, ModelTransport, TransportFactory

OWN = ""
"""The run's own client, among the names ``Fallbacks`` keeps spent quotas under."""

Begin = Callable[[ModelTransport, str], Awaitable[None]]
"""What the flow does with a transport it has just opened (an ACP one begins its session)."""


class Fallbacks:
    def __init__(self, named: tuple[tuple[str, TransportFactory], ...], stack: AsyncExitStack, log: Log, begin: Begin):
        self.names = [name for name, _ in named]
        self._factories = [factory for _, factory in named]
        self._opened: dict[int, ModelTransport] = {}
        self._stack = stack
        self._log = log
        self._begin = begin
        self._spent: dict[str, QuotaExhausted] = {}

    def __repr__(self) -> str:
        return f"<Fallbacks {self.names}>"

    def spent(self, name: str) -> QuotaExhausted | None:
        """The quota ``name`` said was spent, while its window lasts (the run's own is ``OWN``):
        the next turns skip it rather than launch it to hear the same answer."""
        exc = self._spent.get(name)
        if exc is not None and exc.resets_at is not None and exc.resets_at <= datetime.now(UTC):
            del self._spent[name]
            return None
        return exc

    def mark(self, name: str, exc: QuotaExhausted) -> None:
        self._spent[name] = exc

    async def transport(self, index: int) -> ModelTransport:
        if index not in self._opened:
            transport = await self._stack.enter_async_context(self._factories[index](self._log))
            await self._begin(transport, self.names[index])
            self._opened[index] = transport
        return self._opened[index]
