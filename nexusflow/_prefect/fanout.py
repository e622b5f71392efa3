"""A fan-out's members on another process's task runner, watched from their batch: Prefect's
Dask task runner never reports a member on a SIGSTOPped worker (a killed one is
``KilledWorker``), so the batch reads each member's session beat and gives up within a bound;
and it makes its cluster on its first submission unguarded, so submissions go one at a time.
An entry of the ledger (README.md)."""

from __future__ import annotations

import threading
import time
from typing import Any

from prefect.futures import PrefectFuture, PrefectWrappedFuture

from .._support.secrets import get_logger
from ..errors import MapMemberLost, describe
from ..messages import RunResult
from .errors import map_member_never_started
from .locks import BEAT_SECONDS
from .session_lock import GIVE_UP_AFTER, Heartbeat, last_beat, still_held

logger = get_logger("nexusflow.map")


SUBMITTING = threading.Lock()
"""One submission at a time: ``DaskTaskRunner`` makes its cluster and client on its first
submission, unguarded, so members submitted at once from several threads each started a
LocalCluster of their own (seen: four, one failing to start)."""


LOOK_EVERY = 2 * BEAT_SECONDS
"""Seconds a batch waits for a member before it looks at the member's beat again."""


def outcome_within(future: PrefectFuture[Any]) -> RunResult[Any] | None:
    """The member's result if it ends within ``LOOK_EVERY`` seconds, else None; a member that
    failed, or whose process the runner saw die, raises."""
    future.wait(LOOK_EVERY)
    ended = future.wrapped_future.done() if isinstance(future, PrefectWrappedFuture) else future.state.is_final()
    if not ended:
        return None
    value = future.result(raise_on_failure=False)
    if isinstance(value, BaseException):
        raise value
    assert isinstance(value, RunResult), f"a map member returned {type(value).__name__}"
    return value


START_WITHIN = 2 * GIVE_UP_AFTER
"""Seconds a submitted member may go without a first beat while nothing in its batch moves:
a worker that starts cold imports nexusflow as it unpickles its first member, which took up
to 50 s on a loaded machine."""


class Moved:
    """When a batch last moved: a member's beat changed, or its task runner gave a member's
    end. A member queued behind its siblings on a busy task runner waits while they move."""

    def __init__(self) -> None:
        self.at = time.monotonic()

    def now(self) -> None:
        self.at = time.monotonic()


class Pulse:
    """A member's session beat, seen from its batch. Once it beat, a beat that stands still
    for ``GIVE_UP_AFTER`` seconds while its lock stays held means that the member's process
    stopped and that no retry of it took the session over (a retry takes a dead holder's
    session over after ``STALE_AFTER`` seconds, and beats anew). Until it first beats (the
    member is queued, or starting), only ``START_WITHIN`` seconds in which neither it nor any
    sibling moved mean that it was sent to a process that is frozen or gone."""

    def __init__(self, session_id: str, before: Heartbeat | None, moved: Moved) -> None:
        self.session_id = session_id
        self.seen = before
        self.moved = moved
        self.submitted = time.monotonic()
        self.since: float | None = None
        """When the beat last changed, on this process's clock; None until it first does."""
        self.ended = False
        """The member let go of its session: its run ended, and only its task's end is left."""

    async def lost(self) -> MapMemberLost | None:
        """The member's ``MapMemberLost`` once it stood still holding its session past
        ``GIVE_UP_AFTER``, or never started within ``START_WITHIN``; else None. A look that
        fails (storage or server unreachable for a moment) tells nothing: the batch waits on,
        and looks again."""
        try:
            beat = await last_beat(self.session_id)
            now = time.monotonic()
            if beat != self.seen:
                self.seen, self.since = beat, now
                self.moved.now()
                return None
            if self.since is None:
                waited = now - max(self.submitted, self.moved.at)
                return map_member_never_started(self.session_id, waited) if waited >= START_WITHIN else None
            if beat is None or self.ended or now - self.since < GIVE_UP_AFTER:
                return None
            self.ended = not await still_held(beat)
        except Exception as exc:
            logger.warning('map: could not look at member "%s": %s', self.session_id, describe(exc))
            return None
        return None if self.ended else MapMemberLost(self.session_id, now - self.since)
