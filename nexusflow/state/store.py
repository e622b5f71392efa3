"""Where conversations (``client.ask``) and pending runs (``client.resume``) are kept
between runs and processes: Prefect's result storage, so a resume or the next ``ask``
finds them on any machine that sees the same storage."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import anyio
from prefect.settings import get_current_settings
from pydantic import BaseModel, Field, TypeAdapter

from .._prefect.storage import ROOT, innermost_holder, read_record, step_storage, write_atomically, write_record
from .._prefect.storage_tree import delete_record, files
from .._support.digest import digest
from .._support.secrets import redact_all
from ..messages import Message, Request, Text, Usage

_MESSAGES = TypeAdapter(list[Message])


@runtime_checkable
class ConversationStore(Protocol):
    async def get(self, conversation_id: str) -> list[Message]: ...

    async def save(self, conversation_id: str, messages: list[Message]) -> None: ...


class Conversation(BaseModel):
    """A conversation's messages, as one record in result storage."""

    messages: list[Message] = Field(default_factory=list)


def _conversation_part(conversation_id: str) -> str:
    """A conversation id may hold any character; the record's name is its digest."""
    return digest(conversation_id)


def conversation_key(conversation_id: str) -> str:
    """Where ``StorageConversationStore`` keeps a conversation in the result storage."""
    return f"{ROOT}/conversations/{_conversation_part(conversation_id)}.json"


class StorageConversationStore:
    """Conversations in Prefect's result storage (``nexusflow/conversations/``), so an
    ``ask`` on another worker or machine that sees the same storage goes on from them."""

    async def get(self, conversation_id: str) -> list[Message]:
        record = await read_record(Conversation, "conversations", f"{_conversation_part(conversation_id)}.json")
        return record.messages if record is not None else []

    async def save(self, conversation_id: str, messages: list[Message]) -> None:
        record = Conversation(messages=messages)
        await write_record(record, "conversations", f"{_conversation_part(conversation_id)}.json")


class LocalConversationStore:
    """One JSON file per conversation in a folder (by default under Prefect's local storage
    path): for one machine only. The default store, ``StorageConversationStore``, follows
    the result storage instead."""

    def __init__(self, directory: str | Path | None = None) -> None:
        local = Path(get_current_settings().results.local_storage_path).expanduser()
        self.directory = Path(directory) if directory is not None else local / "nexusflow" / "conversations"

    async def get(self, conversation_id: str) -> list[Message]:
        path = self.directory / f"{conversation_id}.json"
        if not path.exists():
            return []
        return _MESSAGES.validate_json(await anyio.Path(path).read_bytes())

    async def save(self, conversation_id: str, messages: list[Message]) -> None:
        content = _MESSAGES.dump_json(messages)
        await anyio.to_thread.run_sync(write_atomically, self.directory / f"{conversation_id}.json", content)


class SessionRecord(BaseModel):
    """A run's inputs: its prompt and the conversation before it. Stored in result storage
    and passed to the flow by reference, because Prefect caps flow parameters at 512 KB."""

    prompt: Text
    history: list[Message] = Field(default_factory=list)
    conversation_id: str | None = None
    pending: Request | None = None


class SessionState(BaseModel):
    """What ``client.resume`` needs to run a session again: its inputs, what it waits for and
    the flow run that ended waiting for it."""

    inputs: str
    conversation_id: str | None = None
    pending: Request | None = None
    waiting: str | None = None
    """The id of the flow run that ended waiting for ``pending``."""


class SessionStatus(BaseModel):
    """Where a session stands, as its last run left it (``nexusflow/sessions/<id>/status.json``):
    what ``list_sessions`` reads. ``running`` is written when a run takes the session; a run
    that crashed leaves it so, and its lease, no longer beating, tells it apart; a run the
    user interrupted or cancelled leaves ``cancelled`` (it goes on from its finished steps)."""

    state: Literal["running", "waiting", "completed", "failed", "cancelled"]
    flow_run_id: str
    updated: datetime
    turns: int = 0
    tool_calls: int = 0
    request: Request | None = None
    error: str | None = None
    cost_usd: float | None = None
    """What the session's turns cost, as reported (its replayed turns at what they first cost)."""
    tokens: int | None = None
    waits_for: str | None = None
    """What a waiting session waits for when it is no answer: a deployment's run waiting for
    its quota's reset, its process gone (it is not crashed, and ``prune`` keeps it)."""
    text: str | None = None
    """A completed run's final answer, so that whoever started it elsewhere (``nexusflow mcp``'s
    ``get_run``) reads it after any restart: a run's own result is not persisted."""
    output: Any = None
    """The final answer validated into the run's output type, as JSON data; None without one."""
    usage: Usage | None = None
    """What its turns cost, summed (its replayed turns at what they first cost)."""


async def write_status(session_id: str, status: SessionStatus) -> None:
    """Written redacted: the status is what ``sessions`` shows, and its request may quote the
    model's arguments; the request to answer is kept whole in the session's state."""
    masked = SessionStatus.model_validate(redact_all(status.model_dump(mode="json")))
    await write_record(masked, "sessions", session_id, "status.json")


async def read_status(session_id: str) -> SessionStatus | None:
    return await read_record(SessionStatus, "sessions", session_id, "status.json")


def inputs_reference(record: SessionRecord) -> str:
    return "inputs-" + digest(record.model_dump(mode="json", exclude={"pending"}))


async def write_inputs(session_id: str, record: SessionRecord) -> str:
    """Store a run's inputs once (their name is their digest) and return the reference."""
    reference = inputs_reference(record)
    await write_record(record.model_copy(update={"pending": None}), "sessions", session_id, f"{reference}.json")
    return reference


async def read_inputs(session_id: str, reference: str) -> SessionRecord | None:
    return await read_record(SessionRecord, "sessions", session_id, f"{reference}.json")


class SessionStore:
    """Session records in Prefect's result storage, so any process that sees the same
    storage (another worker, another machine) can resume a session."""

    where = "Prefect's result storage"

    async def get(self, session_id: str) -> SessionState | None:
        return await read_record(SessionState, "sessions", session_id, "session.json")

    async def save(self, session_id: str, state: SessionState) -> None:
        await write_record(state, "sessions", session_id, "session.json")


class Nesting(BaseModel):
    """A session that runs inside another's tree: a sub-agent in the run whose tool started
    it, a fan-out member in its batch and in the run that started the batch, an exchange in
    its conversation. Recorded as a link, both ways (``nesting.json`` in the session,
    ``nested/<digest>.json`` in its parent and its batch), never read from the ids:
    ``team.prod`` is no exchange of ``team``, and a nested id shortened to fit 128
    characters is still found."""

    parent: str
    kind: Literal["sub-agent", "member", "exchange"]
    batch: str | None = None
    """The named batch (``map(session_id=...)``) of a member started inside a run."""

    def above(self) -> list[str]:
        """Where the session hangs, nearest first: its batch, then its parent."""
        return [name for name in (self.batch, self.parent) if name is not None]


class NestedEntry(BaseModel):
    """One session nested in a parent, as the parent's ``nested/`` folder lists it."""

    session_id: str
    kind: Literal["sub-agent", "member", "exchange"]


_nesting: ContextVar[Nesting | None] = ContextVar("nexusflow_nesting", default=None)


@contextmanager
def nested_in(nesting: Nesting | None) -> Iterator[None]:
    """The run started in the body (``Client.run``) nests so (None: as where it starts)."""
    token = _nesting.set(nesting)
    try:
        yield
    finally:
        _nesting.reset(token)


@contextmanager
def taken_nesting() -> Iterator[Nesting | None]:
    """The nesting the run about to start was given; the runs it starts in turn see none
    unless they are given theirs."""
    token = _nesting.set(None)
    try:
        yield token.old_value if isinstance(token.old_value, Nesting) else None
    finally:
        _nesting.reset(token)


def _nested_entry(parent: str, session_id: str) -> tuple[str, str, str, str]:
    return ("sessions", parent, "nested", f"{digest(session_id)}.json")


def nesting_here(session_id: str, kind: Literal["sub-agent", "member"], batch: str | None = None) -> Nesting | None:
    """How a run about to start here nests: in the run whose context this is (a tool of it
    starting the run), and in its batch; None for a run started outside any run and batch."""
    parent = innermost_holder()
    if parent == session_id:
        parent = None
    if parent is None:
        return Nesting(parent=batch, kind=kind) if batch is not None else None
    return Nesting(parent=parent, kind=kind, batch=batch)


async def write_nesting(session_id: str, nesting: Nesting) -> None:
    """Link the session to its parent and batch, both ways (by the session's holder, as it
    starts)."""
    entry = NestedEntry(session_id=session_id, kind=nesting.kind)
    for above in nesting.above():
        await write_record(entry, *_nested_entry(above, session_id))
    await write_record(nesting, "sessions", session_id, "nesting.json")


async def nesting_of(session_id: str) -> Nesting | None:
    return await read_record(Nesting, "sessions", session_id, "nesting.json")


async def nested_sessions(session_id: str) -> list[str]:
    """The sessions nested directly in ``session_id``, by their links."""
    storage = await step_storage()
    names = await files(storage, f"{ROOT}/sessions/{session_id}/nested")
    entries = [await read_record(NestedEntry, "sessions", session_id, "nested", name) for name in names]
    return [entry.session_id for entry in entries if entry is not None]


async def unlink(session_id: str) -> None:
    """Remove the session's entry from its parent's list (it is forgotten on its own)."""
    nesting = await nesting_of(session_id)
    for above in nesting.above() if nesting is not None else []:
        await delete_record(await step_storage(), "/".join((ROOT, *_nested_entry(above, session_id))))


async def ancestors(session_id: str) -> list[str]:
    """The sessions ``session_id`` hangs under, nearest first, up the links."""
    found: list[str] = []
    walk = [session_id]
    for name in walk:  # grows as it goes
        nesting = await nesting_of(name)
        for above in nesting.above() if nesting is not None else []:
            if above != session_id and above not in found:
                found.append(above)
                walk.append(above)
    return found
