"""An ACP agent's stderr as the connection keeps it (transports/acp/connection.py): a line that
grows without end is redacted once it ends, not at every read, and a secret cut in two where
its start was dropped unread is never half kept."""

from __future__ import annotations

import secrets as random
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from nexusflow._support import secrets
from nexusflow.transports.acp import connection
from nexusflow.transports.acp.connection import _STDERR_BYTES, _STDERR_GROWING, Connection

pytestmark = [pytest.mark.anyio]


async def _chunks(*parts: bytes, size: int = 65536) -> AsyncIterator[bytes]:
    for part in parts:
        for start in range(0, len(part), size):
            yield part[start : start + size]


def _connection(stderr: AsyncIterator[bytes]) -> Connection:
    return Connection(None, None, stderr, on_request=None, on_notification=None)  # type: ignore[arg-type]


@pytest.fixture
def register() -> Iterator[Callable[[str], None]]:
    """``secrets.register`` for the test only: the values are forgotten after it (the
    registry is the process's, and a long one slows every later test's redaction)."""
    given: list[str] = []

    def registered(value: str) -> None:
        given.append(value)
        secrets.register(value)

    yield registered
    for value in given:
        secrets.forget(value)


async def test_a_flood_without_a_newline_is_redacted_once_whatever_its_size(monkeypatch, register):
    for _ in range(300):  # a process that served a few hundred sessions before
        register(random.token_urlsafe(24))
    redacted: list[int] = []

    def counted(text: str) -> str:
        redacted.append(len(text))
        return secrets.redact(text)

    monkeypatch.setattr(connection, "redact", counted)
    flood = 20 * 2**20
    agent = _connection(_chunks(b"x" * flood, b"the end\n"))
    await agent._drain_stderr()
    assert len(redacted) == 1 and redacted[0] <= 2 * _STDERR_GROWING
    (kept,) = agent.stderr_tail
    shown = "x" * (_STDERR_BYTES - len("the end")) + "the end"
    assert kept == f"[{flood + len('the end') - _STDERR_BYTES} bytes cut] {shown}"


async def test_a_secret_cut_in_two_where_a_growing_line_lost_its_start_is_never_half_kept(register):
    secret = random.token_urlsafe(24)  # 32 characters
    long = "L" + random.token_urlsafe(767)  # 1024 characters: its masks shrink what follows 340 times
    for value in (secret, long):
        register(value)
    # The first chunks fill the line to _STDERR_GROWING; the next one, the secret and what
    # follows it, makes it overflow so that its start is dropped in the secret's middle.
    rest = long * 1000
    tail = secret.encode() + rest.encode() + b"b" * (_STDERR_GROWING - 16 - len(rest))
    agent = _connection(_chunks(b"a" * _STDERR_GROWING, tail, size=len(tail)))
    await agent._drain_stderr()
    (kept,) = agent.stderr_tail
    assert secret[16:] not in kept and secret[20:] not in kept, kept[:200]
    assert kept.startswith("[") and kept.endswith("b")


def test_a_forgotten_value_is_no_longer_masked_and_the_others_still_are(register):
    kept, dead = random.token_urlsafe(24), random.token_urlsafe(24)
    register(kept)
    register(dead)
    secrets.forget(dead)
    assert secrets.redact(f"{kept} {dead}") == f"*** {dead}"
