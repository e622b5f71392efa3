"""Where a run's state lives: Prefect's configured result storage, for every step record and
for our own records (a session's inputs, what it waits for, who runs it).

Local storage is made atomic (temporary file, then rename), so a crash never leaves half a
record; an object store's put already is. A record that cannot be read is logged as such
and its step runs again; a record that cannot be written fails the run (see ``StorageError``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import anyio
from prefect._internal.compatibility.async_dispatch import async_dispatch
from prefect._internal.result_records import ResultRecord
from prefect.exceptions import ObjectAlreadyExists
from prefect.filesystems import LocalFileSystem, WritableFileSystem
from prefect.results import aget_default_result_storage
from prefect.settings import get_current_settings
from pydantic import BaseModel

from .._support.secrets import get_logger
from .errors import storage_read_failed, storage_record_unreadable, storage_step_unsynced, storage_write_failed

logger = get_logger("nexusflow.storage")

Model = TypeVar("Model", bound=BaseModel)

_failures: dict[str, str] = {}
"""Storage key -> why writing it failed, for the step that wrote it to report."""

_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, anyio.Lock]] = weakref.WeakKeyDictionary()


def _lock(name: str) -> anyio.Lock:
    """A lock of the running event loop. One lock shared by the loops of several threads
    (each synchronous task that calls ``run_sync`` runs a loop of its own) wakes a waiter
    from the wrong thread, and that waiter sleeps for ever."""
    return _locks.setdefault(asyncio.get_running_loop(), {}).setdefault(name, anyio.Lock())


def write_atomically(path: Path, content: bytes) -> None:
    """A crash mid-write leaves the old file, never half a new one."""
    os.close(_put_in_place(path, content, sync=True))


def _put_in_place(path: Path, content: bytes, *, sync: bool) -> int:
    """Write a temporary file (synced to disk first with ``sync``) and rename it to ``path``;
    return its still open descriptor."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with open(handle, "wb", closefd=False) as file:
            file.write(content)
        if sync:
            os.fsync(handle)
        os.replace(temporary, path)
    except BaseException:
        os.close(handle)
        Path(temporary).unlink(missing_ok=True)
        raise
    return handle


def sync_step_record(handle: int, path: Path) -> None:
    """The second half of a step record's write, in a worker thread: a record that cannot
    be synced is removed, so that no resume trusts it."""
    try:
        os.fsync(handle)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    finally:
        os.close(handle)


_syncing: dict[str, dict[str, asyncio.Task[None]]] = {}
"""Session -> step record key -> the sync of that record to disk, while it runs or once it
failed (a synced record leaves)."""


ROOT = "nexusflow"
"""Every record nexusflow keeps lives under this prefix of the result storage."""


def session_prefix(session_id: str) -> str:
    """Where a session's records live: its steps, inputs, state, lease and invocation."""
    return f"{ROOT}/sessions/{session_id}"


def steps_prefix(session_id: str) -> str:
    """Where a session's step records live (``<prefix>/<step>/<kind>/<call>-<digest>``)."""
    return f"{session_prefix(session_id)}/steps"


def _session_of(key: str) -> str:
    return key.split("/")[2]


def _step_of(key: str) -> str:
    """``turn-3``, ``tool-3 call 1``: a step named by its key (``.../steps/step/kind/call-digest``)."""
    parts = key.split("/")
    if len(parts) < 4:
        return key
    step, kind, call = parts[-3], parts[-2], parts[-1].split("-", 1)[0]
    return f"{kind}-{step}" if kind == "turn" else f"{kind}-{step} call {call}"


def _write_step_record_then_sync(path: Path, content: bytes, in_place: Callable[[], None]) -> None:
    handle = _put_in_place(path, content, sync=False)
    in_place()
    sync_step_record(handle, path)


async def _write_step_record(target: Path, content: bytes, key: str) -> None:
    """Return once the record is in place (readable, and a write error is raised here); its
    sync to disk goes on in the same worker thread while the run goes on, and ``synced``
    waits for it before the session's next tool call, suspension or end. One hop to a
    worker thread, as a plain write; no blocking call on the event loop."""
    loop = asyncio.get_running_loop()
    placed: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not placed.done():
            placed.set_result(None)

    def in_place() -> None:  # called from the worker thread
        loop.call_soon_threadsafe(settle)

    async def write() -> None:
        try:
            await anyio.to_thread.run_sync(_write_step_record_then_sync, target, content, in_place)
        except BaseException as exc:
            if placed.done():  # the sync failed: the session's next ``synced`` reports it
                raise
            placed.set_exception(exc)

    session = _session_of(key)
    syncing = _syncing.setdefault(session, {})
    task = loop.create_task(write())
    syncing[key] = task

    def done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is None and syncing.get(key) is task:
            del syncing[key]
            if not syncing and _syncing.get(session) is syncing:
                del _syncing[session]

    task.add_done_callback(done)
    await placed


async def synced(session_id: str, *, ending: bool = False) -> None:
    """Every step record of the session is on disk. Called where a step with an effect
    starts (a tool call, a suspension) and where a run ends (``ending``: the session's syncs
    are then forgotten): the turn that asked for an effect is durable before the effect
    happens, and every record before the run reports its end, while each sync overlaps
    Prefect's bookkeeping and the next model turn. A record that could not be synced fails
    the next such step of the run (a retried step too), then the run."""
    syncing = _syncing.get(session_id)
    if not syncing:
        return
    loop = asyncio.get_running_loop()
    for key in [key for key, task in syncing.items() if task.get_loop() is not loop]:
        del syncing[key]  # left by a run cancelled in a loop of its own, now gone (one live run per session)
    pending = list(syncing.items())
    if pending:
        await asyncio.wait([task for _, task in pending])
    if ending:
        _syncing.pop(session_id, None)
    for key, task in pending:
        if task.cancelled() or task.exception() is not None:
            raise storage_step_unsynced(_step_of(key), key, task.exception())


def _is_step_record(path: str) -> bool:
    """A key under a session's ``steps/`` (``nexusflow/sessions/<id>/steps/...``)."""
    parts = path.strip("/").split("/")
    return len(parts) > 4 and parts[0] == ROOT and parts[1] == "sessions" and parts[3] == "steps"


class AtomicLocalFileSystem(LocalFileSystem):
    """Prefect's local storage, written atomically and read with a check: Prefect's own
    writer opens the final path and writes in place, so a crash mid-write left a torn
    record that the next run silently treated as missing."""

    _block_type_name = "Nexusflow Atomic Local File System"

    def _record(self, path: str, exc: BaseException) -> None:
        _failures[path] = f"{type(exc).__name__}: {exc}"

    async def awrite_path(self, path: str, content: bytes) -> str:
        target = self._resolve_path(path)
        try:
            if _is_step_record(path):
                await _write_step_record(target, content, path)
            else:
                await anyio.to_thread.run_sync(write_atomically, target, content)
        except Exception as exc:
            self._record(path, exc)
            raise
        return str(target)

    @async_dispatch(awrite_path)
    def write_path(self, path: str, content: bytes) -> str:  # type: ignore[override]
        target = self._resolve_path(path)
        try:
            write_atomically(target, content)
        except Exception as exc:
            self._record(path, exc)
            raise
        return str(target)

    async def aread_path(self, path: str) -> bytes:
        return _checked(path, await super().aread_path(path))

    @async_dispatch(aread_path)
    def read_path(self, path: str) -> bytes:  # type: ignore[override]
        content: bytes = super().read_path(path, _sync=True)  # type: ignore[call-arg, assignment]
        return _checked(path, content)


def _checked(path: str, content: bytes) -> bytes:
    """A step record that does not parse is reported before Prefect quietly runs its
    step again; our own records (not step records) are checked where they are read."""
    if not _is_step_record(path):
        return content
    try:
        ResultRecord.deserialize(content)
    except Exception as exc:
        logger.warning("storage: the record %s is unreadable (%s); its step runs again", path, exc)
        raise
    return content


_atomic: dict[tuple[str, str], AtomicLocalFileSystem] = {}


async def _atomic_block(basepath: str) -> AtomicLocalFileSystem:
    """Prefect takes a task's result storage only as a block saved on the server: saved
    once per process, server and path (a block saved on one server is unknown to another),
    under a name derived from the path."""
    key = (str(get_current_settings().api.url), basepath)
    async with _lock("saving"):
        if key not in _atomic:
            block = AtomicLocalFileSystem(basepath=basepath)
            name = f"nexusflow-results-{hashlib.sha256(basepath.encode()).hexdigest()[:12]}"
            try:
                await block.asave(name, overwrite=True)
            except ObjectAlreadyExists:
                await block.asave(name, overwrite=True)  # a parallel first save won the race
            _atomic[key] = block
        return _atomic[key]


_LOOKUP_EVERY = 30.0
"""Seconds a looked-up result storage is used before it is looked up again."""

_looked_up: dict[tuple[str, str, str], tuple[float, WritableFileSystem]] = {}


async def step_storage() -> WritableFileSystem:
    """The configured result storage, made atomic when it is the local file system. Prefect
    asks the server for its default storage at every lookup (5 of a run's 21 API requests
    were ours), so a lookup serves every run of the process for ``_LOOKUP_EVERY`` seconds,
    per server and storage settings."""
    settings = get_current_settings()
    key = (str(settings.api.url), str(settings.results.default_storage_block), str(settings.results.local_storage_path))
    found = _looked_up.get(key)
    if found is not None and time.monotonic() - found[0] < _LOOKUP_EVERY:
        return found[1]
    async with _lock("looking up"):  # runs started together wait for one lookup, not one each
        found = _looked_up.get(key)
        if found is not None and time.monotonic() - found[0] < _LOOKUP_EVERY:
            return found[1]
        now = time.monotonic()
        storage = await aget_default_result_storage()
        if type(storage) is LocalFileSystem:
            storage = await _atomic_block(str(Path(storage.basepath or ".").expanduser()))
        _looked_up[key] = (now, storage)
        return storage


def storage_failure(key: str) -> str | None:
    """Why the record under ``key`` could not be written, once; None if it was."""
    return _failures.pop(key, None)


def _record_key(*parts: str) -> str:
    return "/".join((ROOT, *parts))


_held: ContextVar[tuple[str, ...]] = ContextVar("nexusflow_held_sessions", default=())
"""The sessions whose lock the current run and the runs it is nested in hold, innermost last
(its context, and the tasks and tool calls it starts)."""

_HOLDERS_ONLY = ("invocation.json", "session.json", "status.json", "lease.json", "nesting.json")
"""A session's records that only its lock's holder writes (``inputs-*.json`` too): a start
that is refused, or a process that lost the lock, must leave every byte of them as it was.
Not among them: ``budget.json``, which a batch (``map``) sets for its members before any of
them runs, and ``spend.json``, which the runs nested in a session add to under the budget's
lock."""


@contextmanager
def holding(session_id: str) -> Iterator[None]:
    """Mark the body as the holder of ``session_id``'s lock: only a holder writes its records."""
    token = _held.set((*_held.get(), session_id))
    try:
        yield
    finally:
        _held.reset(token)


def innermost_holder() -> str | None:
    """The session of the run whose context this is (a tool of it calling ``client.run``), if any."""
    held = _held.get()
    return held[-1] if held else None


def _check_holder(key: str) -> None:
    """A write of a holder-only session record from anything but the holder is a bug: the
    invariant that a refused start changes nothing (``tests/server/state/test_session_writes.py``)."""
    parts = key.split("/")
    if len(parts) != 4 or parts[:2] != [ROOT, "sessions"]:
        return
    name = parts[3]
    if (name in _HOLDERS_ONLY or name.startswith("inputs-")) and parts[2] not in _held.get():
        raise AssertionError(f"{key} written by a run that does not hold session {parts[2]!r}")


async def write_record(value: BaseModel, *parts: str, storage: WritableFileSystem | None = None) -> None:
    """One of our records (``nexusflow/...`` in the result storage); a failed write raises
    ``StorageError``: a record that is not stored cannot be resumed from."""
    key = _record_key(*parts)
    _check_holder(key)
    storage = storage or await step_storage()
    try:
        await _write(storage, key, value.model_dump_json().encode())
    except Exception as exc:
        _failures.pop(key, None)
        raise storage_write_failed(key, exc) from exc


async def _write(storage: WritableFileSystem, key: str, content: bytes) -> None:
    if isinstance(storage, AtomicLocalFileSystem):
        await storage.awrite_path(key, content)
        return
    method: Any = storage.write_path
    result = method(key, content)
    if hasattr(result, "__await__"):
        await result


async def read_record(model: type[Model], *parts: str, storage: WritableFileSystem | None = None) -> Model | None:
    """One of our records, or None when there is none; a record that exists but cannot be
    read is a ``StorageError`` (never a silent None: that would lose a pending run)."""
    key = _record_key(*parts)
    content = await _read(storage or await step_storage(), key)
    if not content:
        return None
    try:
        return model.model_validate_json(content)
    except ValueError as exc:
        raise storage_record_unreadable(key, exc) from exc


async def read_step(model: type[Model], key: str, storage: WritableFileSystem) -> Model | None:
    """The result a step stored under ``key`` (as Prefect wrote it), or None when there is none."""
    content = await _read(storage, key)
    if not content:
        return None
    try:
        return model.model_validate(ResultRecord.deserialize(content).result)
    except ValueError as exc:
        raise storage_record_unreadable(key, exc) from exc


async def _read(storage: WritableFileSystem, key: str) -> bytes | None:
    try:
        method: Any = getattr(storage, "aread_path", None) or storage.read_path
        result = method(key)
        content: bytes = await result if hasattr(result, "__await__") else result
    except Exception as exc:  # each storage says "no such key" in its own exception
        if _missing(exc):
            return None
        raise storage_read_failed(key, exc) from exc
    return content


_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}


def _missing(exc: BaseException) -> bool:
    """Whether a read failed only because there is no such record: the local file system
    (``FileNotFoundError``, or Prefect's ``ValueError: Path ... does not exist``), S3 through
    boto (a ``ClientError`` whose code is 404 or NoSuchKey), GCS and Azure (status 404).
    Anything else is a storage failure, never taken for an absent record."""
    if isinstance(exc, FileNotFoundError):
        return True
    if isinstance(exc, ValueError) and "does not exist" in str(exc):
        return True
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and str(response.get("Error", {}).get("Code")) in _MISSING_CODES:
        return True
    return 404 in (getattr(exc, "code", None), getattr(exc, "status_code", None))


def block_document_id(storage: WritableFileSystem) -> UUID | None:
    """The id of the saved block behind ``storage``, None for an unsaved one: Prefect keeps it
    in a private attribute (``Block._block_document_id``, 3.9.1) and has no public reader."""
    return storage._block_document_id
