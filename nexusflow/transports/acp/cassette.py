"""An ACP session on a cassette: the JSON-RPC conversation with the agent, both ways, and the
MCP tool calls it made to the served toolkit, recorded in the order they happened.

Replay starts no process: ``Played`` is the agent, behind in-memory byte streams that our
``Connection`` reads and writes line by line as it would a process's stdio, so everything of
the client (framing, session, turns, permissions, updates, the served MCP server) still runs.
Each message our client sends must equal, normalised, the recorded one at that point; a
recorded tool call is made again, for real, through the served MCP server over HTTP, and its
result must equal the recorded one. A miss fails the turn with ``CassetteMismatch`` and a diff,
never a live call. When several recorded sessions fit (a test that ran the agent more than
once), each message narrows them: a session is matched by content, not by its position.

What is stored is made safe as a one-shot launch is (``Scrub``): secrets masked, known places
named. The served toolkit's random server name and URL are named too (``<mcp-server>``,
``<mcp-url>``), and the agent's messages get the replaying session's back. Text the agent
streams in chunks is masked as the text the chunks make together, never chunk by chunk: a
secret or a path split over chunks is masked whole (``Recording``).
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ...config._env import expand
from ...errors import CassetteMismatch, MissingVariableError
from ...messages import ToolResult
from ..cassette import AcpEvent, AcpSession, Cassette, Scrub, ToolUse, secret_values
from ..errors import cassette_acp_ended, cassette_acp_nearest, cassette_no_acp_session
from .handshake import capability
from .served import ServedToolkit

SERVER = "<mcp-server>"
URL = "<mcp-url>"
VERSION = "<version>"


def walk(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` (JSON-ready) with ``change`` applied to each of its strings."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {key: walk(item, change) for key, item in value.items()}
    if isinstance(value, list):
        return [walk(item, change) for item in value]
    return value


class SessionScrub:
    """The cassette's ``Scrub`` for one ACP session, plus the served toolkit's name and URL
    (random each session; a place would not do: ``mcp__nexusflow_ab12cd__add`` has no path
    boundary after the name)."""

    def __init__(self, cassette: Cassette, env: dict[str, str], cwd: str, workspace: str) -> None:
        """``env``: what the agent is given, ``${VAR}`` unexpanded; the secret-named variables of
        our own environment are masked too (an agent may have found them another way)."""
        values = dict(os.environ)
        for name, value in env.items():
            try:
                values[name] = expand(value)
            except MissingVariableError:  # unset when replaying, as in CI: nothing to mask
                continue
        places = {"<acp-cwd>": cwd, "<python>": sys.executable}
        if workspace != cwd:
            places["<workspace>"] = workspace
        self._scrub: Scrub = cassette.scrub(secret_values(values), places)
        self._served: list[tuple[str, str]] = []

    def serve(self, served: ServedToolkit) -> None:
        self._served = [(served.url, URL), (served.name, SERVER)]

    def _named(self, text: str) -> str:
        for value, name in self._served:
            text = text.replace(value, name)
        return text

    def safe(self, text: str) -> str:
        return self._scrub.safe(self._named(text))

    def stable(self, text: str) -> str:
        return self._scrub.stable(self._named(text))

    def settled(self, text: str) -> int:
        """How much of the start of ``text``, streamed text that goes on, can be masked for
        good: all but its last ``reach`` characters, as no mask that later text completes
        can begin before them; unless a mask crosses that cut (masking each side alone then
        differs from masking the whole), when nothing is, until more text arrives."""
        cut = len(text) - max([self._scrub.reach(), *(len(value) for value, _ in self._served)])
        if cut <= 0 or self.safe(text[:cut]) + self.safe(text[cut:]) != self.safe(text):
            return 0
        return cut

    def restore(self, text: str) -> str:
        for value, name in self._served:
            text = text.replace(name, value)
        return self._scrub.restore(text)

    def sent(self, message: dict[str, Any]) -> dict[str, Any]:
        """A message of our client as it is matched: stable, and our own version left out
        (a new nexusflow is no drift of the code under test)."""
        stable: dict[str, Any] = walk(message, self.stable)
        info = stable.get("params", {}).get("clientInfo") if stable.get("method") == "initialize" else None
        if isinstance(info, dict) and "version" in info:
            info["version"] = VERSION
        return stable


CHUNKS = ("agent_message_chunk", "agent_thought_chunk", "user_message_chunk")
"""The updates that stream text: a turn's chunks of one kind make one text."""


@dataclass
class _Stream:
    """One turn's streamed text of one kind, being recorded."""

    events: list[int] = field(default_factory=list)
    """Its chunks' events."""
    held: str = ""
    """What arrived of it and is not in its events yet: a mask may still cross it."""


class Recording:
    """The session being recorded; ``Connection`` calls ``sent`` and ``received`` for each
    message, the transport ``tool`` for each served call.

    A streamed chunk is recorded with the text its stream settled (``SessionScrub.settled``):
    the stream's text masked whole, with a tail held back that a mask may still cross, at
    most as long as the longest value masked. The held tail goes to the stream's latest
    chunk whenever the session is written, so the file is whole at every turn. The chunks of
    a stream, joined, are its masked text, and no chunk holds a piece of a secret or a path:
    the replay says what the live run said, masked and with the replaying machine's places.
    Masking as each chunk arrives keeps the work linear in the text, where masking every
    prefix again would be quadratic."""

    def __init__(self, style: str, command: str, scrub: SessionScrub, turn: Callable[[], int | None]) -> None:
        self.style = style
        self.agent = Path(command).name
        self.scrub = scrub
        self._turn = turn
        self._events: list[AcpEvent] = []
        self._streams: dict[tuple[int | None, Any, str], _Stream] = {}
        self.closing = False
        """Our client closes the session: the agent's output ending now is no event of its own."""
        self._ended: int | None = None

    def sent(self, message: dict[str, Any]) -> None:
        self._events.append(AcpEvent(turn=self._turn(), client=self.scrub.sent(message)))

    def received(self, line: bytes) -> None:
        text = line.decode("utf-8", errors="replace")
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        if isinstance(message, dict):
            safe = walk(message, self.scrub.safe)
            update = _chunk(message)
            if update is not None:
                _chunk_text(safe, self._streamed(message, update))
            self._events.append(AcpEvent(turn=self._turn(), agent=safe))
        else:
            self._events.append(AcpEvent(turn=self._turn(), raw=self.scrub.safe(text)))

    def _streamed(self, message: dict[str, Any], update: dict[str, Any]) -> str:
        """What of its stream's text a chunk, the next event, is recorded with."""
        key = (self._turn(), message["params"].get("sessionId"), update["sessionUpdate"])
        stream = self._streams.setdefault(key, _Stream())
        stream.events.append(len(self._events))
        held = stream.held + update["content"]["text"]
        cut = self.scrub.settled(held)
        stream.held = held[cut:]
        return self.scrub.safe(held[:cut])

    def ended(self) -> None:
        if not self.closing and self._ended is None:
            self._ended = len(self._events)
            self._events.append(AcpEvent(turn=self._turn(), ended=""))

    def told(self, detail: str) -> None:
        """How the agent ended, once our client has asked its process."""
        if self._ended is not None and not self._events[self._ended].ended:
            event = self._events[self._ended]
            self._events[self._ended] = event.model_copy(update={"ended": self.scrub.safe(detail)})

    def tool(self, name: str, arguments: dict[str, Any], result: ToolResult, turn: int | None) -> None:
        use = ToolUse(
            name=name,
            arguments=walk(arguments, self.scrub.safe),
            result=self.scrub.stable(result.content),
            is_error=result.is_error,
        )
        self._events.append(AcpEvent(turn=turn, tool=use))

    def session(self) -> AcpSession:
        events = list(self._events)
        for stream in self._streams.values():
            if stream.held:
                last = stream.events[-1]
                agent = copy.deepcopy(events[last].agent)
                assert agent is not None, "a chunk event holds what the agent sent"
                _chunk_text(agent, _chunk_text(agent) + self.scrub.safe(stream.held))
                events[last] = events[last].model_copy(update={"agent": agent})
        return AcpSession(style=self.style, agent=self.agent, events=events)


def _chunk(message: dict[str, Any]) -> dict[str, Any] | None:
    """The update of a ``session/update`` streaming text (``CHUNKS``), if ``message`` is one."""
    params = message.get("params")
    update = params.get("update") if message.get("method") == "session/update" and isinstance(params, dict) else None
    if not isinstance(update, dict) or update.get("sessionUpdate") not in CHUNKS:
        return None
    content = update.get("content")
    return update if isinstance(content, dict) and isinstance(content.get("text"), str) else None


def _chunk_text(message: dict[str, Any], text: str | None = None) -> str:
    """A chunk's text; with ``text``, set to it first."""
    content = message["params"]["update"]["content"]
    if text is not None:
        content["text"] = text
    return str(content["text"])


class _Sink(ByteSendStream):
    """Our client's side of the played agent's stdin."""

    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Source(ByteReceiveStream):
    """Our client's side of the played agent's stdout."""

    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self._stream = stream

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._stream.receive()

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Failed(Exception):
    """The replay stops: ``Played.failure`` says why."""


@dataclass
class _Place:
    """Where one recorded session that still fits stands in its events."""

    at: int = 0
    ids: dict[Any, Any] = field(default_factory=dict)
    """Our client's request ids as recorded, to the ids it sends now: past a skipped turn they differ."""
    reopened: bool = False
    """Our client resumed (or loaded) the recorded session in place of its ``session/new``."""
    new_id: Any = None
    """The recorded ``session/new`` request that a resume or load took the place of."""


class Played:
    """The recorded agent, played: ``stdin`` and ``stdout`` stand for its process's.

    A resumed run reopens the agent's session (``session/resume`` or ``session/load``, as the
    recorded ``initialize`` answer advertised) and asks only for the turns its store does not
    hold. So the played agent takes a reopen of the session it recorded in place of that
    ``session/new`` (answered as it was, without the id our client already has), and, once
    reopened, a ``session/prompt`` equal to a later recorded one skips ahead to it: the turns
    between replay from the store. Anything else is a mismatch, as ever."""

    def __init__(
        self,
        cassette: Cassette,
        style: str,
        scrub: SessionScrub,
        turn: Callable[[], int | None],
        served: Callable[[], ServedToolkit | None],
        ended: Callable[[str], None],
    ) -> None:
        self.cassette = cassette
        self.style = style
        self.scrub = scrub
        self.failure: CassetteMismatch | None = None
        self._turn = turn
        self._served = served
        self._ended = ended
        to_agent, self._from_client = anyio.create_memory_object_stream[bytes](math.inf)
        self._to_client, from_agent = anyio.create_memory_object_stream[bytes](math.inf)
        self.stdin: ByteSendStream = _Sink(to_agent)
        self.stdout: ByteReceiveStream = _Source(from_agent)
        self._buffer = b""
        self._sessions = cassette.acp_sessions
        self._places = {index: _Place() for index in cassette.acp_candidates(style)}
        """The sessions that fit what was played so far, in recording order: the first leads."""

    async def aclose(self) -> None:
        if self._places:
            self.cassette.acp_played(next(iter(self._places)))
        for stream in (self.stdin, self._to_client, self._from_client, self.stdout):
            await stream.aclose()

    async def run(self) -> None:
        """Play the leading session's events; a miss ends the agent's output (our client
        then fails what waits on it, and the transport raises ``failure``)."""
        try:
            await self._play()
        except _Failed:
            await self._to_client.aclose()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    async def _play(self) -> None:
        while True:
            lead = next(iter(self._places.items()), None)
            session = self._sessions[lead[0]] if lead is not None else None
            if lead is None or session is None or lead[1].at >= len(session.events):
                message = await self._next()
                if message is None:
                    return
                what = _what(message)
                self._fail(cassette_acp_ended(what) if lead else cassette_no_acp_session(self.style), [])
            place = lead[1]
            event = session.events[place.at]
            if event.client is not None:
                message = await self._next()
                if message is None:
                    return  # our client ended the session first: what it did not send is not drift
                self._places = self._answered(event, event.client, self.scrub.sent(message))
                continue
            if event.ended is not None:
                self._ended(self.scrub.restore(event.ended))
                await self._to_client.aclose()
                await self._from_client.aclose()
                return
            if event.tool is not None:
                event = await self._call(event, event.tool)
            else:
                line = (
                    event.raw if event.raw is not None else json.dumps(_as_now(event.agent, place), ensure_ascii=False)
                )
                await self._to_client.send((self.scrub.restore(line) + "\n").encode())
            kept = {i: p for i, p in self._places.items() if _event(self._sessions[i], p.at) == event}
            for kept_place in kept.values():
                kept_place.at += 1
            self._places = kept

    def _answered(self, event: AcpEvent, recorded: dict[str, Any], asked: dict[str, Any]) -> dict[int, _Place]:
        """The sessions that take what our client sent, each moved past it: the same message,
        else a reopen of the recorded session, else (once reopened) a later turn's prompt."""
        kept: dict[int, _Place] = {}
        for index, place in self._places.items():
            here = _event(self._sessions[index], place.at)
            if here is None or here.client is None:
                continue  # that session ended, or has the agent speak here
            if _same(here.client, asked):
                kept[index] = place
            elif _reopens(self._sessions[index], place.at, asked):
                place.reopened, place.new_id = True, here.client.get("id")
                kept[index] = place
            else:
                ahead = _ahead(self._sessions[index], place, asked)
                if ahead is None:
                    continue
                place.at = ahead
                kept[index] = place
        if not kept:
            self._fail(cassette_acp_nearest(_what(recorded), event.turn), _diff(event, recorded, asked, self._turn()))
        for index, place in kept.items():
            sent = self._sessions[index].events[place.at].client or {}
            if "method" in asked and "id" in asked:
                place.ids[sent.get("id")] = asked["id"]
            place.at += 1
        return kept

    async def _call(self, event: AcpEvent, use: ToolUse) -> AcpEvent:
        """Make the recorded call through the served MCP server, as the agent did, and return
        it with the result it got: the sessions recorded with that result go on (a call that
        ended its run pending in one, and was answered in another)."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        served = self._served()
        if served is None:
            self._fail(cassette_acp_nearest(f"call of tool {use.name}", event.turn), [])
        arguments = walk(use.arguments, self.scrub.restore)
        async with (
            httpx2.AsyncClient(headers=served.headers, timeout=httpx2.Timeout(30, read=3600)) as http,
            Client(streamable_http_client(served.url, http_client=http)) as client,
        ):
            result = await client.call_tool(use.name, arguments)
        text = "".join(getattr(block, "text", "") for block in result.content)
        got = use.model_copy(update={"result": self.scrub.stable(text), "is_error": bool(result.is_error)})
        made = event.model_copy(update={"tool": got})
        if not any(_event(self._sessions[i], place.at) == made for i, place in self._places.items()):
            recorded = {"tool": use.name, "result": use.result, "is_error": use.is_error}
            replayed = {"tool": got.name, "result": got.result, "is_error": got.is_error}
            self._fail(
                cassette_acp_nearest(f"result of tool {use.name}", event.turn),
                _diff(event, recorded, replayed, self._turn()),
            )
        return made

    async def _next(self) -> dict[str, Any] | None:
        """Our client's next message, None once it closed its side."""
        while b"\n" not in self._buffer:
            try:
                self._buffer += await self._from_client.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    def _fail(self, nearest: str, diff: list[str]) -> NoReturn:
        self.failure = CassetteMismatch(self.cassette.path, self._turn(), 1, nearest, diff)
        raise _Failed


def _event(session: AcpSession, index: int) -> AcpEvent | None:
    return session.events[index] if index < len(session.events) else None


REOPENS = {"session/resume": ("sessionCapabilities", "resume"), "session/load": ("loadSession",)}
"""How our client reopens a session, in the order it prefers them, and the capability each needs."""


def _without_id(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "id"}


def _same(recorded: dict[str, Any] | None, asked: dict[str, Any]) -> bool:
    """Our client's request matches by all but its id (its own counter, which a skipped turn
    shifts); an answer to the agent's request and a notification match whole."""
    if recorded is None:
        return False
    if "method" in recorded and "id" in recorded and "method" in asked and "id" in asked:
        return _without_id(recorded) == _without_id(asked)
    return recorded == asked


def _answer(session: AcpSession, at: int, request_id: Any) -> dict[str, Any]:
    """The result the agent gave our client's request ``request_id`` sent at ``at``."""
    for event in session.events[at + 1 :]:
        agent = event.agent
        if agent is not None and "method" not in agent and agent.get("id") == request_id:
            result = agent.get("result")
            return result if isinstance(result, dict) else {}
    return {}


def _reopening(session: AcpSession) -> str | None:
    """How our client reopens this session: the first of ``REOPENS`` that the recorded
    ``initialize`` answer advertised."""
    for at, event in enumerate(session.events):
        if event.client is not None and event.client.get("method") == "initialize":
            capabilities = _answer(session, at, event.client.get("id")).get("agentCapabilities")
            return next((method for method, path in REOPENS.items() if capability(capabilities, *path)), None)
    return None


def _reopens(session: AcpSession, at: int, asked: dict[str, Any]) -> bool:
    """``asked`` resumes (or loads) the session recorded at ``at`` with its ``session/new``:
    the method the recorded capabilities make our client choose, the recorded session's id,
    and the same working directory and MCP servers."""
    new = session.events[at].client
    if new is None or new.get("method") != "session/new" or asked.get("method") != _reopening(session):
        return False
    params = asked.get("params")
    if not isinstance(params, dict) or "sessionId" not in params:
        return False
    recorded = _answer(session, at, new.get("id")).get("sessionId")
    return params["sessionId"] == recorded and {k: v for k, v in params.items() if k != "sessionId"} == new.get(
        "params"
    )


def _ahead(session: AcpSession, place: _Place, asked: dict[str, Any]) -> int | None:
    """In a reopened session, at a turn's prompt: where a later recorded prompt equals
    ``asked`` (the turns between replayed from the store), if one does."""
    here = session.events[place.at].client
    if not place.reopened or here is None or here.get("method") != "session/prompt":
        return None
    if asked.get("method") != "session/prompt":
        return None
    return next(
        (at for at in range(place.at + 1, len(session.events)) if _same(session.events[at].client, asked)), None
    )


def _as_now(message: dict[str, Any] | None, place: _Place) -> dict[str, Any] | None:
    """An agent's answer to our client's request, under the id that request has now; the
    answer to a ``session/new`` that a reopen took the place of without the session id (a
    resume or load answer has none)."""
    if message is None or "method" in message or "id" not in message:
        return message
    recorded = message["id"]
    now = {**message, "id": place.ids.get(recorded, recorded)}
    result = message.get("result")
    if place.reopened and recorded == place.new_id and isinstance(result, dict):
        now["result"] = {key: value for key, value in result.items() if key != "sessionId"}
    return now


def _what(message: dict[str, Any]) -> str:
    """A message as a mismatch names it: its method, or the answer to which request."""
    method = message.get("method")
    if isinstance(method, str):
        return method if "id" in message else f"{method} notification"
    return f"answer to request {message.get('id')!r}"


def _lines(value: Any) -> list[str]:
    """JSON, a multi-line string as a list of its lines: a diff shows the line that changed."""

    def split(item: Any) -> Any:
        if isinstance(item, str) and "\n" in item:
            return item.split("\n")
        if isinstance(item, dict):
            return {key: split(part) for key, part in item.items()}
        if isinstance(item, list):
            return [split(part) for part in item]
        return item

    return json.dumps(split(value), indent=2, ensure_ascii=False).splitlines()


def _diff(event: AcpEvent, recorded: Any, asked: Any, turn: int | None) -> list[str]:
    def where(step: int | None) -> str:
        return f"turn {step}" if step is not None else "handshake"

    return list(
        difflib.unified_diff(
            _lines(recorded),
            _lines(asked),
            fromfile=f"recorded ({where(event.turn)})",
            tofile=f"asked ({where(turn)})",
            n=2,
            lineterm="",
        )
    )
