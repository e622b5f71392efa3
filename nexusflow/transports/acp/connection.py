"""JSON-RPC 2.0 over an agent's stdio, one message per line.

Each direction has its own id space, so a message is a request or a notification when it
has a ``method`` and a response otherwise. The reader never blocks on a handler: requests
from the agent are answered from tasks of their own, and a malformed line is reported
without losing the messages around it. A line is held to ``MAX_LINE`` bytes: past it we stop
reading (``broken``), so an agent that never ends a line cannot make us buffer without bound.
What the agent says is redacted before it is kept or logged: its stderr may print the bearer
token or the environment it was given.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup

from ..._support.secrets import get_logger, longest, redact
from ...errors import AcpError, RemoteError
from ..errors import acp_exited, acp_input_closed, acp_line_too_long
from ..oneshot.process import MAX_OUTPUT

logger = get_logger("nexusflow.acp")

METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
_STDERR_LINES = 200
_STDERR_BYTES = 64 * 2**10
"""How much of the agent's stderr we keep: its tail, and of a longer line its end."""
_STDERR_GROWING = 16 * _STDERR_BYTES
"""Bytes of a line still growing that are held as they came, before it is redacted and cut
(once it ends): a line twice as long drops its start unread. Redacting the line's end at
every read of a flood cost as much as the flood times the secrets registered (a 50 MiB flood
took over a minute in a process with a few hundred)."""
MAX_LINE = MAX_OUTPUT
"""Bytes one line from the agent may carry: the one-shot transport's cap on a launch's output."""


def as_object(value: Any) -> dict[str, Any]:
    """A JSON object from the wire, or an empty one for anything else."""
    return value if isinstance(value, dict) else {}


def _line_end(line: bytes | bytearray, started_cut: bool = False) -> tuple[bytes, int]:
    """The last ``_STDERR_BYTES`` of ``line`` and how many bytes were cut before them. Redacted
    before it is cut, so a secret across the cut is masked rather than half kept. When the
    line's start was already dropped unread (``started_cut``), a secret may have been cut in
    two there: its end is never kept, however short the redacted line is."""
    redacted = redact(bytes(line).decode("utf-8", errors="surrogateescape")).encode("utf-8", errors="surrogateescape")
    unsafe = 4 * longest() if started_cut else 0  # a secret's UTF-8 bytes, at most
    cut = max(len(redacted) - _STDERR_BYTES, min(unsafe, len(redacted)))
    return redacted[cut:], cut


class MethodNotFound(Exception):
    """Raised by a request handler for a method it does not serve."""


@dataclass
class _Pending:
    method: str
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: BaseException | None = None


class Tap(Protocol):
    """Sees every message as it goes (a cassette recording the conversation)."""

    def sent(self, message: dict[str, Any]) -> None: ...

    def received(self, line: bytes) -> None: ...

    def ended(self) -> None:
        """The agent's output ended (it exited, or closed its stdout)."""


RequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]
NotificationHandler = Callable[[str, dict[str, Any]], None]


class Connection:
    def __init__(
        self,
        stdin: ByteSendStream,
        stdout: ByteReceiveStream,
        stderr: ByteReceiveStream | None,
        *,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        on_stderr: Callable[[str], None] | None = None,
        tap: Tap | None = None,
    ) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._stderr = stderr
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_stderr = on_stderr
        self._tap = tap
        self._write_lock = anyio.Lock()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._closed: AcpError | None = None
        self.broken: AcpError | None = None
        """Why we stopped reading the agent's stdout (a line over ``MAX_LINE``); None while we read."""
        self._group: TaskGroup | None = None
        self.stderr_tail: deque[str] = deque()
        """The agent's last stderr lines, redacted: at most ``_STDERR_LINES`` and ``_STDERR_BYTES``
        characters, but always the newest line (cut to its last ``_STDERR_BYTES`` bytes)."""
        self._stderr_size = 0
        self.malformed: list[str] = []

    def start(self, group: TaskGroup) -> None:
        self._group = group
        group.start_soon(self._read)
        if self._stderr is not None:
            group.start_soon(self._drain_stderr)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        if self._closed is not None:
            raise self._closed
        request_id = self._next_id
        self._next_id += 1
        pending = _Pending(method)
        self._pending[request_id] = pending
        try:
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await pending.done.wait()
        finally:
            self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """A notification carries no id, so nobody waits for an answer that never comes."""
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, ensure_ascii=False) + "\n").encode()
        async with self._write_lock:
            if self._tap is not None:
                self._tap.sent(message)
            try:
                await self._stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise self._closed or acp_input_closed() from exc

    async def _read(self) -> None:
        """Lines as they complete; a line past ``MAX_LINE`` ends the reading and fails every
        request (the agent is left to whoever owns it: the turn kills it)."""
        line = bytearray()
        try:
            async for chunk in self._stdout:
                *ended, rest = chunk.split(b"\n")
                for part in ended:
                    line += part
                    if len(line) > MAX_LINE:
                        break
                    if line.strip():
                        self._dispatch(bytes(line))
                    line.clear()
                else:
                    line += rest
                if len(line) > MAX_LINE:
                    self.broken = acp_line_too_long(MAX_LINE)
                    self.close(self.broken)
                    return
            if line.strip():
                self._dispatch(bytes(line))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        if self._tap is not None:
            self._tap.ended()
        self.close(acp_exited())

    def close(self, reason: AcpError) -> None:
        """Fail every request still waiting: nothing will answer them now."""
        if self._closed is None:
            self._closed = reason
        for pending in list(self._pending.values()):
            if not pending.done.is_set():
                pending.error = self._closed
                pending.done.set()

    def _dispatch(self, line: bytes) -> None:
        if self._tap is not None:
            self._tap.received(line)
        try:
            message = json.loads(line)
            if not isinstance(message, dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError) as exc:
            text = redact(line.decode("utf-8", errors="replace"))[:200]
            self.malformed.append(text)
            logger.warning("acp: ignoring a malformed line from the agent (%s): %s", exc, text)
            return
        method = message.get("method")
        if isinstance(method, str):
            params = as_object(message.get("params"))
            if "id" in message and message["id"] is not None:
                assert self._group is not None
                self._group.start_soon(self._answer, message["id"], method, params)
            else:
                self._on_notification(method, params)
            return
        self._resolve(message)

    def _resolve(self, message: dict[str, Any]) -> None:
        pending = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if pending is None:
            logger.warning("acp: ignoring a response to no request of ours: id %r", message.get("id"))
            return
        error = message.get("error")
        if isinstance(error, dict):
            pending.error = RemoteError(
                pending.method,
                int(error.get("code", INTERNAL_ERROR)),
                redact(str(error.get("message", ""))),
                error.get("data"),
            )
        else:
            pending.result = message.get("result")
        pending.done.set()

    async def _answer(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        try:
            result = await self._on_request(method, params)
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": result}
        except MethodNotFound:
            reply = {
                "jsonrpc": "2.0",
                "id": request_id,
                "error": {"code": METHOD_NOT_FOUND, "message": f"{method} is not supported"},
            }
        except Exception as exc:
            logger.exception("acp: answering %s failed", method)
            reply = {"jsonrpc": "2.0", "id": request_id, "error": {"code": INTERNAL_ERROR, "message": str(exc)}}
        try:
            await self._send(reply)
        except AcpError:
            logger.debug("acp: the agent left before our answer to %s", method)

    async def _drain_stderr(self) -> None:
        """Lines as they complete, a line over ``_STDERR_BYTES`` cut to its end as it grows:
        stderr is only ever quoted, so no amount of it fails the run or grows our memory."""
        assert self._stderr is not None
        line = bytearray()
        cut = 0
        try:
            async for chunk in self._stderr:
                *ended, rest = chunk.split(b"\n")
                for part in ended:
                    line += part
                    self._keep_stderr(line, cut)
                    line.clear()
                    cut = 0
                line += rest
                if len(line) > 2 * _STDERR_GROWING:
                    dropped = len(line) - _STDERR_GROWING
                    del line[:dropped]
                    cut += dropped
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        if line:
            self._keep_stderr(line, cut)

    def _keep_stderr(self, line: bytearray, cut: int) -> None:
        kept, more = _line_end(line, started_cut=cut > 0)
        text = kept.decode("utf-8", errors="replace")
        if cut + more:
            text = f"[{cut + more} bytes cut] {text}"
        self.stderr_tail.append(text)
        self._stderr_size += len(text)
        while len(self.stderr_tail) > 1 and (
            len(self.stderr_tail) > _STDERR_LINES or self._stderr_size > _STDERR_BYTES
        ):
            self._stderr_size -= len(self.stderr_tail.popleft())
        if self._on_stderr is not None:
            self._on_stderr(text)

    def stderr_text(self, limit: int = 1000) -> str:
        return "\n".join(self.stderr_tail).strip()[-limit:]
