"""A session's lock let go of after its run returned: the end of a run never waits for the delete.

The server deletes a lock by reading it and then writing, and on SQLite a write that commits
in between makes it answer 503. Right after a run it is still recording the run's steps (for
seconds after a long run of quick turns), so that delete was most of a run's end: 0.1 s after
one turn, 0.4-5.7 s after forty. The run has already stored a beat that says it let go
(``Beat.released``), so nobody waits for the delete: a contender of the session that finds the
lock still there deletes it itself, at once.

The deletes are made side by side on an event loop of their own, on one thread of the
process, each in the context of the run that let go (its Prefect settings, hence its server).
The process waits for them at exit, at most ``DRAIN_WITHIN`` seconds; a lock left then, or by
a process killed first, is deleted by the session's next contender (a session never run again
keeps it until ``nexusflow forget`` or ``prune`` removes it)."""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import threading
import time
import uuid
from dataclasses import dataclass, field

import anyio
import anyio.to_thread
from prefect.client.orchestration import PrefectClient, get_client
from prefect.settings import get_current_settings

from .._support.secrets import get_logger
from ..errors import describe
from .locks import delete

logger = get_logger("nexusflow.locks")

DRAIN_WITHIN = 20.0
"""Seconds a process waits at exit for the deletes it has not made yet (a busy SQLite server
refuses them for as long as it catches up)."""
FIRST_AFTER = 1.0
"""Seconds after its run let go that a delete is first tried, unless something waits for it
(the session's next run in this process, or the process's exit): sent at once, it met the
run's own last requests on the server and made the run's end slower by as much as it saved."""
KEPT = 1000
"""Let-goes done whose outcome a process remembers (a lock id and a flag each), so that the
session's next run in it knows the lock is gone without asking the server; older ones are
forgotten (a long-lived worker). The run's context goes with the delete: it holds the run."""


@dataclass
class _Letting:
    lock_id: uuid.UUID
    what: str
    context: contextvars.Context
    done: threading.Event = field(default_factory=threading.Event)
    deleted: bool = False
    hurry: asyncio.Event = field(default_factory=asyncio.Event)
    """Set (on the let-go loop) when something waits for the delete: it is tried at once."""


_letting: dict[uuid.UUID, _Letting] = {}
"""The let-goes not done yet."""
_done: dict[uuid.UUID, bool] = {}
"""The lock ids let go of since, oldest first: whether each was deleted."""
_guard = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_tasks: set[asyncio.Task[None]] = set()


def let_go_later(lock_id: uuid.UUID, what: str) -> None:
    """Delete the lock on the let-go thread, in the caller's context."""
    global _loop
    letting = _Letting(lock_id, what, contextvars.copy_context())
    with _guard:
        _letting[lock_id] = letting
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="nexusflow-let-go", daemon=True).start()
            atexit.register(drain)  # registered after Prefect's own exit hooks, so it runs before them
    _loop.call_soon_threadsafe(_start, letting)


async def let_go_of(lock_id: uuid.UUID, within: float) -> bool:
    """Whether this process deleted the lock: once its let-go is done (waited for at most
    ``within`` seconds); False for a lock this process did not let go of, or could not delete."""
    with _guard:
        letting = _letting.get(lock_id)
        if letting is None:
            return _done.get(lock_id, False)
    if not letting.done.is_set():
        _hurry(letting)
        await anyio.to_thread.run_sync(letting.done.wait, within, abandon_on_cancel=True)
    return letting.deleted


def drain(within: float = DRAIN_WITHIN) -> list[str]:
    """Wait for the deletes not made yet; what is still left after ``within`` seconds (said
    once, as a warning: their sessions' next runs delete them)."""
    deadline = time.monotonic() + within
    with _guard:
        pending = [letting for letting in _letting.values() if not letting.done.is_set()]
    for letting in pending:
        _hurry(letting)
    for letting in pending:
        letting.done.wait(max(0.0, deadline - time.monotonic()))
    left = [letting.what for letting in pending if not letting.done.is_set()]
    if left:
        logger.warning(
            "%d lock(s) not let go of within %.0fs (%s); the next run of each session deletes it",
            len(left),
            within,
            ", ".join(left),
        )
    return left


_clients: dict[str, PrefectClient] = {}
"""One client per server, opened on the let-go loop by its first delete and kept for the
process's life: a client asks the server for its CSRF token as it opens, a request every run
paid for its let-go."""
_opening: asyncio.Lock | None = None


async def _client() -> PrefectClient:
    """The kept client of the server the current context names."""
    global _opening
    url = str(get_current_settings().api.url or "embedded")
    _opening = _opening or asyncio.Lock()
    async with _opening:
        if url not in _clients:
            client = get_client()
            await client.__aenter__()
            _clients[url] = client
    return _clients[url]


def _hurry(letting: _Letting) -> None:
    if _loop is not None:
        _loop.call_soon_threadsafe(letting.hurry.set)


def _start(letting: _Letting) -> None:
    task = asyncio.get_running_loop().create_task(_delete(letting), context=letting.context)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


async def _delete(letting: _Letting) -> None:
    """The lock deleted (or found gone: a contender deleted it); a failure is one warning,
    never an error: the session's next contender deletes the lock."""
    try:
        with anyio.move_on_after(FIRST_AFTER):
            await letting.hurry.wait()
        await delete(await _client(), letting.lock_id)
        letting.deleted = True
    except Exception as exc:
        logger.warning("%s: could not let go of its lock (%s); its next run deletes it", letting.what, describe(exc))
    finally:
        with _guard:
            _letting.pop(letting.lock_id, None)
            _done[letting.lock_id] = letting.deleted
            while len(_done) > KEPT:
                del _done[next(iter(_done))]
        letting.done.set()
