"""The agent's process: spawned in its own process group with only the environment it is
given, its stderr logged (bounded), how it ended told in errors, and the group killed at the end."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from anyio.abc import Process

from ..._support.launches import forget_launch, kill_group, note_launch
from ..._support.secrets import register_environment
from ...config._env import expand_all
from ..errors import acp_exit_detail, acp_not_found, acp_permission_denied

if TYPE_CHECKING:
    from .config import AcpConfig
    from .connection import Connection

BASE_ENVIRONMENT = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR", "TZ", "SHELL")
"""The parent's variables an agent gets; everything else must be given explicitly."""

_STDERR_LOG_LINES = 500


class AgentProcess:
    def __init__(self, config: AcpConfig, log: Callable[[str], None]) -> None:
        self.config = config
        self.process: Process | None = None
        self._log = log
        self._stderr_lines = 0
        self._scratch: str | None = None
        self._note: Path | None = None
        """Its note (``launches``), for a kill -9 of this process to leave nothing behind."""
        self.told: Callable[[str], None] | None = None
        """Sees how the agent ended, each time it is told (a cassette recording it)."""
        self.replayed_end: str | None = None
        """How a played agent ended, as the recording told it: no process to ask."""

    def environment(self) -> dict[str, str]:
        """The base variables, the style's and the client's; ``TMPDIR`` is a folder of the
        agent's own, removed with it (unless one is given): an agent leaves files in its
        temporary folder (claude its probes and sockets), which weeks of jobs would pile up.
        Its secret-named values are registered for redaction: the agent may say them."""
        launch = self.config.style.acp
        base = {key: os.environ[key] for key in BASE_ENVIRONMENT if key in os.environ}
        given = {**expand_all(launch.env if launch else {}), **expand_all(self.config.env)}
        private = {"TMPDIR": self._scratch} if self._scratch is not None and "TMPDIR" not in given else {}
        env = {**base, **private, **given}
        register_environment(env)
        return env

    async def spawn(self) -> Process:
        launch = self.config.style.acp
        argv = [self.config.command, *(launch.args if launch else [])]
        self._scratch = tempfile.mkdtemp(prefix="nexusflow-acp-")
        try:
            self.process = await anyio.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.environment(),
                cwd=self.config.cwd,
                start_new_session=True,
            )
        except BaseException as exc:
            self._remove_scratch()
            if isinstance(exc, FileNotFoundError):
                raise acp_not_found(self.config.command) from exc
            if isinstance(exc, PermissionError):
                raise acp_permission_denied(self.config.command) from exc
            raise
        self._note = note_launch(self.process.pid, scratch=self._scratch)
        return self.process

    def _remove_scratch(self) -> None:
        forget_launch(self._note)
        self._note = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def on_stderr(self, line: str) -> None:
        self._stderr_lines += 1
        if self._stderr_lines <= _STDERR_LOG_LINES:
            self._log(f"agent stderr: {line}")
        elif self._stderr_lines == _STDERR_LOG_LINES + 1:
            self._log(f"agent stderr: more than {_STDERR_LOG_LINES} lines; the rest are not logged")

    async def exit_detail(self, connection: Connection | None) -> str:
        """How the agent ended, once it has: its exit status and the end of its stderr."""
        if self.replayed_end is not None:
            return self.replayed_end
        if self.process is not None:
            with anyio.move_on_after(2):
                await self.process.wait()
        code = self.process.returncode if self.process is not None else None
        detail = acp_exit_detail(code, connection.stderr_text() if connection is not None else "")
        if self.told is not None:
            self.told(detail)
        return detail

    def kill(self) -> None:
        if self.process is not None:
            kill_group(self.process.pid)
        self._remove_scratch()

    async def stop(self) -> None:
        process = self.process
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()
            launch = self.config.style.acp
            if launch is not None and launch.terminate_on_close:
                _terminate_group(process.pid)
            with anyio.move_on_after(1):
                await process.wait()
            kill_group(process.pid)
            self._remove_scratch()
            await process.aclose()


def _terminate_group(pid: int) -> None:
    """SIGTERM the agent's group: each process ends as it would at its own adapter's stop,
    at once rather than after its grace; the SIGKILL that follows ends what did not."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
