"""``LiveRun``: the one object that carries a run's live objects and settings from
``Client.run`` to the ``agent_run`` flow, and from the flow to its steps.

It travels as the flow's ``live`` parameter. A flow's parameters are also sent to the
server for the UI, through FastAPI's ``jsonable_encoder``: a plain class with slots is
something it cannot encode, so the server stores the placeholder ``<LiveRun>`` and never a
system prompt, a tool, or a transport's environment."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .._support.digest import digest
from ..config.options import ClientOptions
from ..messages import Answer, Request
from ..state.events import Emit
from ..state.store import Nesting, SessionRecord
from ..toolkit import Toolkit
from ..transports import TransportFactory


class LiveRun:
    """What ``Client.run`` gives the ``agent_run`` flow it starts: the client's options (the
    run's output type included), the transport, the toolkit, where events go, the answers
    given to the run's pending requests (keyed by ``bound``: an answer is for one call with
    its arguments) and the flow run that ended waiting for them."""

    __slots__ = (
        "answered",
        "answers",
        "emit",
        "failure",
        "fallbacks",
        "finishing",
        "nesting",
        "on_held",
        "options",
        "record",
        "toolkit",
        "transport",
    )

    def __init__(
        self,
        options: ClientOptions,
        transport: TransportFactory,
        toolkit: Toolkit,
        emit: Emit | None = None,
        answers: dict[str, Answer] | None = None,
        answered: str | None = None,
        fallbacks: tuple[tuple[str, TransportFactory], ...] = (),
        record: SessionRecord | None = None,
        nesting: Nesting | None = None,
        on_held: tuple[Callable[[], Awaitable[None]], ...] = (),
    ) -> None:
        self.options = options
        self.transport = transport
        self.toolkit = toolkit
        self.emit = emit
        self.answers = answers or {}
        self.answered = answered
        self.fallbacks = fallbacks
        """The fallback clients' names and transports, asked in order when a quota is spent."""
        self.record = record
        """The run's inputs: the flow stores them once it holds the session, never before."""
        self.nesting = nesting
        """The session this run is nested in, linked once the flow holds the session."""
        self.on_held = on_held
        """What the caller keeps of the session (the command's invocation): written by the
        flow once it holds the session, so a start that is refused writes nothing."""
        self.finishing: list[asyncio.Task[None]] = []
        """What the flow left to finish after its return (its artifacts): ``Client.run`` awaits it."""
        self.failure: BaseException | None = None
        """The error the run failed with: ``Client.run`` starts the run again when it is the
        API's (``PrefectApiError``), known by its class, not by the name the result carries."""

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


_on_held: ContextVar[tuple[Callable[[], Awaitable[None]], ...]] = ContextVar("nexusflow_on_held", default=())


@contextmanager
def when_held(*writes: Callable[[], Awaitable[None]]) -> Iterator[None]:
    """The run started in the body (``Client.run``) makes ``writes`` once it holds its session."""
    token = _on_held.set(writes)
    try:
        yield
    finally:
        _on_held.reset(token)


def taken_writes() -> tuple[Callable[[], Awaitable[None]], ...]:
    """The writes given to the run about to start: given to it alone, not to the runs it nests."""
    writes = _on_held.get()
    _on_held.set(())
    return writes


def bound(request: Request) -> str:
    """The key an answer is given under: the request's position and the call it asks about,
    its arguments included, so an approval is never used for another call at that position
    (a rerun whose model asked for something else there)."""
    return f"{request.id}:{digest([request.tool, request.arguments])}"
