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

from .messages import Message, Request

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
    """What ``client.resume`` needs to run a session again: its inputs, and what it waits for."""

    prompt: str
    history: list[Message] = Field(default_factory=list)
    conversation_id: str | None = None
    pending: Request | None = None


class SessionStore:
    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else _root() / "sessions"

    def _path(self, session_id: str) -> Path:
        return self.directory / f"{session_id}.json"

    async def get(self, session_id: str) -> SessionRecord | None:
        path = self._path(session_id)
        if not path.exists():
            return None
        return SessionRecord.model_validate_json(await anyio.Path(path).read_bytes())

    async def save(self, session_id: str, record: SessionRecord) -> None:
        await anyio.to_thread.run_sync(_write_atomically, self._path(session_id), record.model_dump_json())
