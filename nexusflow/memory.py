"""Where conversations (``client.ask``) and pending runs (``client.resume``) are kept
between runs and processes: Prefect's result storage, so a resume or the next ``ask``
finds them on any machine that sees the same storage."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import anyio
from prefect.settings import get_current_settings
from pydantic import BaseModel, Field, TypeAdapter

from ._digest import digest
from ._secrets import redact_all
from ._storage import ROOT, read_record, write_atomically, write_record
from .messages import Message, Request, Text

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
    that crashed leaves it so, and its lease, no longer beating, tells it apart."""

    state: Literal["running", "waiting", "completed", "failed"]
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


async def write_status(session_id: str, status: SessionStatus) -> None:
    """Written redacted: the status is what ``sessions`` shows, and its request may quote the
    model's arguments; the request to answer is kept whole in the session's state."""
    masked = SessionStatus.model_validate(redact_all(status.model_dump(mode="json")))
    await write_record(masked, "sessions", session_id, "status.json")


async def read_status(session_id: str) -> SessionStatus | None:
    return await read_record(SessionStatus, "sessions", session_id, "status.json")


def _inputs_reference(record: SessionRecord) -> str:
    return "inputs-" + digest(record.model_dump(mode="json", exclude={"pending"}))


async def write_inputs(session_id: str, record: SessionRecord) -> str:
    """Store a run's inputs once (their name is their digest) and return the reference."""
    reference = _inputs_reference(record)
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
