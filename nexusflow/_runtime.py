"""``LiveRun``: the one object that carries a run's live objects and settings from
``Client.run`` to the ``agent_run`` flow, and from the flow to its steps.

It travels as the flow's ``live`` parameter. A flow's parameters are also sent to the
server for the UI, through FastAPI's ``jsonable_encoder``: a plain class with slots is
something it cannot encode, so the server stores the placeholder ``<LiveRun>`` and never a
system prompt, a tool, or a transport's environment."""

from __future__ import annotations

import asyncio

from ._digest import digest
from .events import Emit
from .messages import Answer, Request
from .options import ClientOptions
from .toolkit import Toolkit
from .transports import TransportFactory


class LiveRun:
    """What ``Client.run`` gives the ``agent_run`` flow it starts: the client's options (the
    run's output type included), the transport, the toolkit, where events go, the answers
    given to the run's pending requests (keyed by ``bound``: an answer is for one call with
    its arguments) and the flow run that ended waiting for them."""

    __slots__ = ("answered", "answers", "emit", "fallbacks", "finishing", "options", "toolkit", "transport")

    def __init__(
        self,
        options: ClientOptions,
        transport: TransportFactory,
        toolkit: Toolkit,
        emit: Emit | None = None,
        answers: dict[str, Answer] | None = None,
        answered: str | None = None,
        fallbacks: tuple[tuple[str, TransportFactory], ...] = (),
    ) -> None:
        self.options = options
        self.transport = transport
        self.toolkit = toolkit
        self.emit = emit
        self.answers = answers or {}
        self.answered = answered
        self.fallbacks = fallbacks
        """The fallback clients' names and transports, asked in order when a quota is spent."""
        self.finishing: list[asyncio.Task[None]] = []
        """What the flow left to finish after its return (its artifacts): ``Client.run`` awaits it."""

    async def finished(self) -> None:
        """Await what the flow left to finish; the first failure is raised, the rest cancelled."""
        tasks, self.finishing = self.finishing, []
        try:
            for task in tasks:
                await task
        finally:
            for task in tasks:
                task.cancel()

    def __repr__(self) -> str:
        return f"<LiveRun of {len(self.toolkit.specs())} tools>"


def bound(request: Request) -> str:
    """The key an answer is given under: the request's position and the call it asks about,
    its arguments included, so an approval is never used for another call at that position
    (a rerun whose model asked for something else there)."""
    return f"{request.id}:{digest([request.tool, request.arguments])}"
