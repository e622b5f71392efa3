"""One CLI process: argv (never a shell), its own process group, both pipes drained at once.

The whole group is killed when the CLI exits (leftover children are orphans nobody waits
for), on timeout and on cancellation, so a turn never leaves a process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass

import anyio
from anyio.abc import ByteReceiveStream, Process

from ...errors import CliError, cli_not_found, cli_timed_out


@dataclass(frozen=True)
class Finished:
    code: int
    stdout: bytes
    stderr: bytes
    seconds: float


def kill_group(pid: int) -> None:
    """SIGKILL a whole process group; one that is already gone is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _drain(stream: ByteReceiveStream | None, sink: list[bytes]) -> None:
    if stream is None:
        return
    async for chunk in stream:
        sink.append(chunk)


async def _feed(process: Process, data: bytes) -> None:
    assert process.stdin is not None
    try:
        await process.stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the CLI stopped reading; its exit status tells the rest
    finally:
        await process.stdin.aclose()


async def run_cli(
    argv: list[str], *, stdin: bytes | None, env: dict[str, str], cwd: str | None, timeout: float
) -> Finished:
    started = time.perf_counter()
    try:
        process = await anyio.open_process(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise cli_not_found(argv[0]) from exc
    except PermissionError as exc:
        raise CliError(f"cli: cannot run {argv[0]}: permission denied") from exc
    stdout: list[bytes] = []
    stderr: list[bytes] = []
    try:
        with anyio.move_on_after(timeout) as deadline:
            async with anyio.create_task_group() as group:
                group.start_soon(_drain, process.stdout, stdout)
                group.start_soon(_drain, process.stderr, stderr)
                if stdin is not None:
                    group.start_soon(_feed, process, stdin)
                code = await process.wait()
                kill_group(process.pid)
        if deadline.cancelled_caught:
            raise cli_timed_out(round(timeout * 1000))
    finally:
        with anyio.CancelScope(shield=True):
            kill_group(process.pid)
            await process.aclose()
    return Finished(code=code, stdout=b"".join(stdout), stderr=b"".join(stderr), seconds=time.perf_counter() - started)
