"""The ACP transport: one warm agent process per flow run, our toolkit served to it as an
MCP server, one ``session/prompt`` per model turn.

The agent calls our tools natively; each call arrives at the served MCP server and goes to
the turn's ``call_tool`` (the flow makes it the same keyed tool task the loop would run),
so a resumed turn does not run a finished tool again. Nothing here knows Prefect.

This class is the facade: the process (``process``), the handshake (``handshake``), the
session (``session``), the turn (``turn``), updates (``updates``), permissions
(``permissions``), the served toolkit (``served``) and the cassette (``cassette``: the
session recorded, or played with no process) each live in their own module.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..._support.secrets import forget
from ...errors import AcpError, RemoteError
from ...messages import ModelReply, ModelRequest, ToolResult, ToolSpec
from ..base import Remember, TurnScope
from ..cassette import Cassette
from ..errors import acp_ended, acp_no_initialize
from .cassette import Played, Recording, SessionScrub
from .config import AcpConfig, check_cwd
from .connection import Connection, MethodNotFound
from .handshake import check_protocol_version, initialize_params
from .permissions import Permissions
from .process import AgentProcess
from .served import ServedToolkit, serve_toolkit
from .session import Session, mcp_servers
from .turn import Turns
from .updates import Updates

__all__ = ["AcpConfig", "AcpTransport", "check_cwd"]

logger = logging.getLogger("nexusflow.acp")


class AcpTransport:
    """Lives for one flow run: ``start`` spawns the agent and shakes hands, ``begin`` opens
    (or resumes) the session with the served toolkit, ``generate`` runs one prompt."""

    def __init__(self, config: AcpConfig, cassette: Cassette | None = None) -> None:
        """``cassette``: the session is recorded to it, or played from it with no process."""
        self.config = config
        self.capabilities: dict[str, Any] = {}
        self._stack = AsyncExitStack()
        self._group: TaskGroup | None = None
        self._connection: Connection | None = None
        self._log: Callable[[str], None] = logger.info
        self._agent = AgentProcess(config, self._say)
        self._updates = Updates()
        self._permissions = Permissions(self._updates.announced, self._say)
        self._session = Session(config, self._say)
        self._turns = Turns(config, self._agent, self._permissions, self._updates.updates)
        self._cassette = cassette
        self._recording: Recording | None = None
        self._played: Played | None = None
        if cassette is not None:
            scrub = SessionScrub(
                cassette,
                {**(config.style.acp.env if config.style.acp else {}), **config.env},
                config.cwd,
                config.workspace,
            )
            if cassette.replaying:
                self._played = Played(cassette, config.style.name, scrub, self._turn, self._served, self._replayed_end)
            else:
                self._recording = Recording(config.style.name, config.command, scrub, self._turn)
                self._agent.told = self._recording.told

    @property
    def session_id(self) -> str | None:
        return self._session.id

    @property
    def updates(self) -> list[dict[str, Any]]:
        return self._updates.updates

    @property
    def unknown_updates(self) -> list[str]:
        return self._updates.unknown_updates

    def _say(self, line: str) -> None:
        self._log(line)

    def _turn(self) -> int | None:
        current = self._turns.current
        return current.scope.step if current is not None else None

    def _replayed_end(self, detail: str) -> None:
        self._agent.replayed_end = detail

    def _served(self) -> ServedToolkit | None:
        return self._permissions.served

    @asynccontextmanager
    async def _replayed(self) -> AsyncIterator[None]:
        """A failure of a played session is its mismatch, however our client saw it end."""
        try:
            yield
        except Exception as exc:
            if self._played is not None and self._played.failure is not None:
                raise self._played.failure from exc
            raise

    async def start(self, log: Callable[[str], None] | None = None) -> None:
        if log is not None:
            self._log = log
        async with self._replayed():
            await self._start()
        if self._recording is not None and self._cassette is not None:
            self._cassette.add_acp(self._recording)

    async def _start(self) -> None:
        played = self._played
        if played is not None:
            stdin, stdout, stderr = played.stdin, played.stdout, None
            self._stack.push_async_callback(played.aclose)
        else:
            process = await self._agent.spawn()
            self._stack.push_async_callback(self._agent.stop)
            assert process.stdin is not None and process.stdout is not None
            stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
        self._group = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(self._group.cancel_scope.cancel)
        self._connection = Connection(
            stdin,
            stdout,
            stderr,
            on_request=self._on_request,
            on_notification=self._on_notification,
            on_stderr=self._agent.on_stderr,
            tap=self._recording,
        )
        if played is not None:
            self._group.start_soon(played.run)
        self._connection.start(self._group)
        try:
            with anyio.fail_after(self.config.handshake_timeout):
                reply = await self._connection.request("initialize", initialize_params())
        except TimeoutError:
            await self.close()
            raise acp_no_initialize(self.config.command, self.config.handshake_timeout) from None
        except AcpError as exc:
            await self.close()
            raise acp_ended(exc, await self._agent.exit_detail(self._connection)) from exc
        try:
            self.capabilities = check_protocol_version(reply).get("agentCapabilities") or {}
        except AcpError:
            await self.close()
            raise

    async def close(self) -> None:
        self._permissions.cancelling = True
        if self._recording is not None:
            self._recording.closing = True
        try:
            await self._stack.aclose()
        finally:
            try:
                if self._recording is not None and self._cassette is not None:
                    await self._cassette.saved()
            finally:
                served = self._permissions.served
                if served is not None:  # its server, the agent and its stderr are gone
                    forget(served.token)

    async def _on_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            return self._permissions.decide(params)
        raise MethodNotFound(method)

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        self._updates.receive(method, params, None if self._session.replaying else self._turns.current)

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        assert self._connection is not None
        try:
            return await self._connection.request(method, params)
        except AcpError as exc:
            if isinstance(exc, RemoteError):
                raise
            raise acp_ended(exc, await self._agent.exit_detail(self._connection)) from exc

    async def begin(self, remember: Remember, tools: list[ToolSpec]) -> None:
        async with self._replayed():
            await self._begin(remember, tools)

    async def _call_served(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        turn = self._turn()
        result = await self._turns.call_served(name, arguments)
        if self._recording is not None:
            self._recording.tool(name, arguments, result, turn)
        return result

    async def _begin(self, remember: Remember, tools: list[ToolSpec]) -> None:
        served = await self._stack.enter_async_context(serve_toolkit(tools, self._call_served))
        self._permissions.served = served
        if self._recording is not None:
            self._recording.scrub.serve(served)
        if self._played is not None:
            self._played.scrub.serve(served)
        servers = mcp_servers(served, self.capabilities)

        async def new_session() -> str:
            return await self._session.new(self._request, servers)

        agent_session, replayed = await remember("acp-session", {"style": self.config.style.name}, new_session)
        if replayed:
            await self._session.reopen(self._request, agent_session, servers, self.capabilities)
        await self._session.configure(self._request)

    async def generate(self, request: ModelRequest, scope: TurnScope | None = None) -> ModelReply:
        """One ``session/prompt``. On timeout: ``session/cancel``, a grace period, then the
        whole process group is killed."""
        assert self._connection is not None and self._group is not None
        try:
            async with self._replayed():
                return await self._turns.generate(self._connection, self._group, self._session, request, scope)
        finally:
            if self._recording is not None and self._cassette is not None:
                await self._cassette.saved()
