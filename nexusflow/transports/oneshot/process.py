"""One CLI process: argv (never a shell), its own process group, both pipes drained at once.

Nothing the CLI starts may outlive its turn, including a daemon that left the process
group (``setsid``) and still holds our pipes. Each launch carries a unique environment
variable, ``NEXUSFLOW_LAUNCH_<random>=1``, which every descendant inherits; when the CLI
exits, on timeout, on cancellation and on an output overflow, the group is killed and so
is every process whose ``/proc/<pid>/environ`` carries the tag. Why a tag: a subreaper
(``PR_SET_CHILD_SUBREAPER``) would make every orphan of the whole Python process ours to
reap, and a per-launch cgroup needs a writable delegated cgroup that most hosts do not give
an unprivileged user; the tag needs neither. Its limit: a descendant that replaces its
environment (``env -i``, an ``execve`` with a fresh one, a process that overwrites its
environment block) or runs as another user is not found, and is left to the group kill.
After the CLI exits its pipes are drained for ``DRAIN_GRACE`` more at most.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from dataclasses import dataclass, field

import anyio
from anyio import CancelScope
from anyio.abc import ByteReceiveStream, Process

from ..._support.launches import kill_group, kill_tagged, noted
from ..errors import cli_not_found, cli_output_limit, cli_permission_denied, cli_timed_out

MAX_OUTPUT = 16 * 2**20
"""Default cap, in bytes, on each of stdout and stderr: past it the turn fails."""
DRAIN_GRACE = 1.0
"""Seconds the pipes are still read once the CLI has exited; whatever holds them after
that (a descendant we could not kill) is cut off."""
TAG_PREFIX = "NEXUSFLOW_LAUNCH_"


@dataclass(frozen=True)
class Finished:
    code: int
    stdout: bytes
    stderr: bytes
    seconds: float


@dataclass
class _Output:
    """One stream of the CLI, kept up to ``limit`` bytes."""

    name: str
    limit: int
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0

    @property
    def over(self) -> bool:
        return self.size > self.limit


async def _end(pid: int, tag: str) -> None:
    kill_group(pid)
    await anyio.to_thread.run_sync(kill_tagged, tag)


async def _drain(stream: ByteReceiveStream | None, output: _Output, scope: CancelScope) -> None:
    """Read until EOF; past the cap, stop the whole launch at once."""
    if stream is None:
        return
    async for chunk in stream:
        output.size += len(chunk)
        if output.over:
            scope.cancel()
            return
        output.chunks.append(chunk)


async def _feed(process: Process, data: bytes) -> None:
    assert process.stdin is not None
    try:
        await process.stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the CLI stopped reading; its exit status tells the rest
    finally:
        await process.stdin.aclose()


async def run_cli(
    argv: list[str],
    *,
    stdin: bytes | None,
    env: dict[str, str],
    cwd: str | None,
    timeout: float,
    max_output: int = MAX_OUTPUT,
    scratch: str | None = None,
) -> Finished:
    """The CLI run to its end; while it runs, it is noted (``launches``) with ``scratch``, its
    scratch folder, so that a kill -9 of this process leaves neither behind for long."""
    started = time.perf_counter()
    tag = TAG_PREFIX + secrets.token_hex(8)
    try:
        process = await anyio.open_process(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, tag: "1"},
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise cli_not_found(argv[0]) from exc
    except PermissionError as exc:
        raise cli_permission_denied(argv[0]) from exc
    stdout = _Output("stdout", max_output)
    stderr = _Output("stderr", max_output)
    code: int | None = None
    with noted(process.pid, tag=tag, scratch=scratch):
        try:
            with anyio.move_on_after(timeout):
                async with anyio.create_task_group() as group:
                    group.start_soon(_drain, process.stdout, stdout, group.cancel_scope)
                    group.start_soon(_drain, process.stderr, stderr, group.cancel_scope)
                    if stdin is not None:
                        group.start_soon(_feed, process, stdin)
                    code = await process.wait()
                    await _end(process.pid, tag)
                    group.cancel_scope.deadline = min(group.cancel_scope.deadline, anyio.current_time() + DRAIN_GRACE)
            for output in (stdout, stderr):
                if output.over:
                    raise cli_output_limit(output.name, max_output)
            if code is None:
                raise cli_timed_out(round(timeout * 1000))
        finally:
            with anyio.CancelScope(shield=True):
                await _end(process.pid, tag)  # again: a timeout, a cancellation or an overflow skipped the first
                await process.aclose()
    return Finished(
        code=code,
        stdout=b"".join(stdout.chunks),
        stderr=b"".join(stderr.chunks),
        seconds=time.perf_counter() - started,
    )
