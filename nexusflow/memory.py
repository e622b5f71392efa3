"""Where conversations (``client.ask``) and pending runs (``client.resume``) are kept
between runs and processes: by default JSON files next to Prefect's results, so a resume
finds them wherever the results are."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Protocol, runtime_checkable

import anyio
from prefect.settings import get_current_settings
from pydantic import BaseModel, Field, TypeAdapter

from ._digest import digest
from ._storage import read_record, write_record
from .messages import Message, Request, Text

_MESSAGES = TypeAdapter(list[Message])


@runtime_checkable
class ConversationStore(Protocol):
    async def get(self, conversation_id: str) -> list[Message]: ...

    async def save(self, conversation_id: str, messages: list[Message]) -> None: ...


def _root() -> Path:
    return Path(get_current_settings().results.local_storage_path).expanduser() / "nexusflow"


def _write_atomically(path: Path, text: str) -> None:
    """A crash mid-write leaves the old file, never half a new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class LocalConversationStore:
    """One JSON file per conversation under ``<Prefect local storage>/nexusflow/conversations``."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else _root() / "conversations"

    async def get(self, conversation_id: str) -> list[Message]:
        path = self.directory / f"{conversation_id}.json"
        if not path.exists():
            return []
        return _MESSAGES.validate_json(await anyio.Path(path).read_bytes())

    async def save(self, conversation_id: str, messages: list[Message]) -> None:
        text = _MESSAGES.dump_json(messages).decode()
        await anyio.to_thread.run_sync(_write_atomically, self.directory / f"{conversation_id}.json", text)


class SessionRecord(BaseModel):
    """A run's inputs: its prompt and the conversation before it. Stored in result storage
    and passed to the flow by reference, because Prefect caps flow parameters at 512 KB."""

    prompt: Text
    history: list[Message] = Field(default_factory=list)
    conversation_id: str | None = None
    pending: Request | None = None


class SessionState(BaseModel):
    """What ``client.resume`` needs to run a session again: its inputs and what it waits for."""

    inputs: str
    conversation_id: str | None = None
    pending: Request | None = None


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
