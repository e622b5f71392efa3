"""A cassette: the launches of one test's agent CLIs and its ACP sessions, recorded once and
replayed offline (an ACP session is recorded and played by ``transports.acp.cassette``).

It sits at the one-shot transport's boundary, never at HTTP: a CLI talks to its own
provider. Replay starts no process and needs no binary; everything above the transport (the
envelope's parsing, the tools, the flow and its task runs) still runs. A replayed launch is
matched by what it asks, never by its position, and a request no recording matches fails the
turn with a diff against the nearest one: replay never falls through to a live call.
"""

from __future__ import annotations

import difflib
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio

from ...config.settings import CassetteMode, settings
from ...errors import CassetteMismatch
from ...messages import ModelReply
from ..errors import (
    cassette_missing,
    cassette_mode_unknown,
    cassette_nearest,
    cassette_nothing_recorded,
    cassette_played_out,
)
from . import schema
from .normalise import Scrub, default_places
from .schema import AcpSession, Answer, Asked, CassetteFile, Launch


class Recorded(Protocol):
    """An ACP session being recorded: the cassette asks it for what it holds so far."""

    def session(self) -> AcpSession: ...


class Cassette:
    """One test's recording. ``mode``: ``record``, ``replay`` or ``auto`` (replay when the
    file exists, else record); when not given, ``NEXUSFLOW_CASSETTE_MODE``, else ``auto``.
    ``places`` names folders that differ between machines (``{"<tmp_path>": tmp_path}``),
    beside the working directory and the home folder. Share one cassette between the
    clients of a test: each launch is matched by what it asks."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: CassetteMode | None = None,
        *,
        places: Mapping[str, str | os.PathLike[str]] | None = None,
    ) -> None:
        chosen = mode if mode is not None else settings().cassette_mode
        if chosen not in ("record", "replay", "auto"):
            raise cassette_mode_unknown(chosen)
        self.path = Path(path)
        exists = self.path.exists()
        if chosen == "replay" and not exists:
            raise cassette_missing(self.path)
        self.mode: Literal["record", "replay"] = (
            "replay" if chosen == "replay" or (chosen == "auto" and exists) else "record"
        )
        self._places = default_places() | {name: os.fspath(value) for name, value in (places or {}).items()}
        self._file = schema.read(self.path) if self.mode == "replay" else CassetteFile()
        self._played: set[int] = set()
        self._played_acp: set[int] = set()
        self._recording: list[Recorded] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Cassette {self.path} ({self.mode})>"

    @property
    def replaying(self) -> bool:
        return self.mode == "replay"

    @property
    def launches(self) -> list[Launch]:
        return list(self._file.launches)

    def unplayed(self) -> list[Launch]:
        """Recorded launches no replayed one has matched (yet)."""
        return [launch for index, launch in enumerate(self._file.launches) if index not in self._played]

    @property
    def acp_sessions(self) -> list[AcpSession]:
        """The ACP sessions recorded (so far, when recording)."""
        return [*self._file.acp, *(recorded.session() for recorded in self._recording)]

    def has_acp(self, style: str) -> bool:
        return any(session.style == style for session in self._file.acp)

    def acp_candidates(self, style: str) -> list[int]:
        """The sessions of ``style`` no replayed session has played, in recording order."""
        return [i for i, session in enumerate(self._file.acp) if session.style == style and i not in self._played_acp]

    def acp_played(self, index: int) -> None:
        self._played_acp.add(index)

    def unplayed_acp(self) -> list[AcpSession]:
        return [session for index, session in enumerate(self._file.acp) if index not in self._played_acp]

    def add_acp(self, recorded: Recorded) -> None:
        """A session to record: its events are written with the cassette from now on."""
        with self._lock:
            self._recording.append(recorded)

    def scrub(self, secrets: list[str], places: Mapping[str, str] | None = None) -> Scrub:
        """``places``: more of them, for one client's; they win over the cassette's own for the
        same folder, so a client's folder is named the same wherever the test runs from."""
        more = dict(places or {})
        kept = {name: value for name, value in self._places.items() if value not in more.values()}
        return Scrub(kept | more, secrets)

    def play(self, asked: Asked, turn: int | None, launch: int, scrub: Scrub) -> Answer | ModelReply:
        """The answer recorded for ``asked`` (normalised here), or the reply exported for its
        request, each recording played once."""
        wanted = _stable(asked, scrub)
        same = [index for index, entry in enumerate(self._file.launches) if entry.asked == _compared(entry, wanted)]
        for index in same:
            if index not in self._played:
                self._played.add(index)
                entry = self._file.launches[index]
                if entry.answer is None:
                    return ModelReply.model_validate(_strings(entry.reply, scrub.restore))
                return _texts(entry.answer, scrub.restore)
        if same:
            raise CassetteMismatch(self.path, turn, launch, cassette_played_out(len(same)), [])
        raise self._mismatch(wanted, turn, launch)

    def _mismatch(self, wanted: Asked, turn: int | None, launch: int) -> CassetteMismatch:
        if not self._file.launches:
            return CassetteMismatch(self.path, turn, launch, cassette_nothing_recorded(), [])

        def likeness(index: int) -> tuple[float, bool, bool]:
            entry = self._file.launches[index]
            asked_lines = _lines(_compared(entry, wanted))
            ratio = difflib.SequenceMatcher(None, _lines(entry.asked), asked_lines, autojunk=False).ratio()
            return ratio, index not in self._played, entry.turn == turn

        nearest = self._file.launches[max(range(len(self._file.launches)), key=likeness)]
        diff = list(
            difflib.unified_diff(
                _lines(nearest.asked),
                _lines(_compared(nearest, wanted)),
                fromfile=f"recorded (turn {nearest.turn})",
                tofile=f"asked (turn {turn})",
                n=2,
                lineterm="",
            )
        )
        return CassetteMismatch(self.path, turn, launch, cassette_nearest(nearest.turn, nearest.launch), diff)

    async def record(
        self, asked: Asked, answer: Answer, *, turn: int | None, launch: int, seconds: float, scrub: Scrub
    ) -> None:
        """Add a live launch, made safe, and write the file at once: a run that crashes
        keeps what it recorded."""
        safe = _texts(answer, scrub.safe)
        entry = Launch(turn=turn, launch=launch, asked=_stable(asked, scrub), answer=safe, seconds=round(seconds, 3))
        with self._lock:
            self._file.launches.append(entry)
        await anyio.to_thread.run_sync(self.save)

    def save(self) -> None:
        """Write what was recorded (a replayed cassette is left as it is)."""
        if self.mode != "record":
            return
        with self._lock:
            recorded = [*self._file.acp, *(recorded.session() for recorded in self._recording)]
            schema.write(self.path, schema.text(self._file.model_copy(update={"acp": recorded})))

    async def saved(self) -> None:
        """``save`` off the event loop."""
        await anyio.to_thread.run_sync(self.save)

    @contextmanager
    def used(self) -> Iterator[Cassette]:
        """While inside, the cassette of every CLI client opened without one (what the
        pytest marker does for a test)."""
        _ACTIVE.append(self)
        try:
            yield self
        finally:
            _ACTIVE.remove(self)


_ACTIVE: list[Cassette] = []


def active_cassette() -> Cassette | None:
    """The innermost cassette in use (``Cassette.used``), if any."""
    return _ACTIVE[-1] if _ACTIVE else None


def _texts(answer: Answer, change: Callable[[str], str]) -> Answer:
    """``answer`` with ``change`` applied to each of its texts (not to those kept as hex)."""

    def changed(text: str | None, name: str) -> str | None:
        return text if text is None or name in answer.hex else change(text)

    return answer.model_copy(
        update={name: changed(getattr(answer, name), name) for name in ("stdout", "stderr", "file", "failed")}
    )


def exported(turn: int, request: dict[str, Any], reply: ModelReply, seconds: float, scrub: Scrub) -> Launch:
    """A session's turn as an exported launch, made safe as a recorded one: its request
    normalised for matching, its reply masked and its places named. The reply keeps what the
    model said and what it cost; how it was produced (launches, repairs) was no launch here."""
    said = reply.model_dump(mode="json", exclude_none=True, include={"content", "tool_calls", "usage"})
    asked = Asked(request=scrub.request(request))
    return Launch(turn=turn, asked=asked, reply=_strings(said, scrub.safe), seconds=round(seconds, 3))


def _compared(entry: Launch, wanted: Asked) -> Asked:
    """What of ``wanted`` the entry is matched on: all of it, or for an exported launch,
    which is replayed above the envelope and the process, its request alone."""
    return wanted if entry.answer is not None else wanted.model_copy(update={"argv": None, "prompt": None})


def _strings(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` (JSON-ready) with ``change`` applied to each of its strings."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {key: _strings(item, change) for key, item in value.items()}
    if isinstance(value, list):
        return [_strings(item, change) for item in value]
    return value


def _stable(asked: Asked, scrub: Scrub) -> Asked:
    return Asked(
        argv=None if asked.argv is None else [scrub.stable(arg) for arg in asked.argv],
        prompt=None if asked.prompt is None else scrub.stable(asked.prompt),
        request=scrub.request(asked.request),
        repair=None if asked.repair is None else scrub.stable(asked.repair),
    )


def _lines(asked: Asked) -> list[str]:
    return json.dumps(asked.model_dump(mode="json"), indent=2, ensure_ascii=False).splitlines()
