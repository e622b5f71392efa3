"""The agent session the turns run in: new, resumed, loaded, or fresh and seeded with the
transcript; then its mode and model."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ...errors import RemoteError
from ..errors import acp_cannot_set_model, acp_no_session_id
from .auth import not_logged_in
from .bridge import TOKEN_VARIABLE
from .config import AcpConfig
from .connection import as_object
from .handshake import capability
from .served import ServedToolkit

Request = Callable[[str, dict[str, Any]], Awaitable[Any]]


def mcp_servers(served: ServedToolkit, capabilities: dict[str, Any]) -> list[dict[str, Any]]:
    """The served toolkit over HTTP if the agent takes it, else through the stdio bridge."""
    if capability(capabilities, "mcpCapabilities", "http"):
        headers = [{"name": key, "value": value} for key, value in served.headers.items()]
        return [{"type": "http", "name": served.name, "url": served.url, "headers": headers}]
    return [
        {
            "name": served.name,
            "command": sys.executable,
            "args": ["-m", "nexusflow", "mcp-bridge", served.url],
            "env": [{"name": TOKEN_VARIABLE, "value": served.token}],
        }
    ]


class Session:
    def __init__(self, config: AcpConfig, log: Callable[[str], None]) -> None:
        self.config = config
        self.id: str | None = None
        self.seed = False
        """A fresh session standing in for one the agent lost: the next prompt carries the transcript."""
        self.replaying = False
        """``session/load`` replays the old session's updates; they are no part of a turn."""
        self.reopened = False
        """The agent resumed or loaded the session: it has seen the transcript up to its last answer."""
        self._reply: Any = None
        self._log = log

    async def new(self, request: Request, servers: list[dict[str, Any]]) -> str:
        try:
            reply = await request("session/new", self._params({"cwd": self.config.cwd, "mcpServers": servers}))
        except RemoteError as exc:
            if (login := not_logged_in(self.config.style, exc)) is not None:
                raise login from exc
            raise
        session_id = reply.get("sessionId") if isinstance(reply, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise acp_no_session_id()
        self.id = session_id
        self._reply = reply
        return session_id

    async def reopen(
        self, request: Request, agent_session: str, servers: list[dict[str, Any]], capabilities: dict[str, Any]
    ) -> None:
        """Resume if advertised, else load if advertised, else (or when the agent fails to)
        a fresh session seeded with the transcript; the log says which, never silently.
        Finished tool calls replay from storage whatever the agent remembers."""
        params = self._params({"sessionId": agent_session, "cwd": self.config.cwd, "mcpServers": servers})
        method = None
        if capability(capabilities, "sessionCapabilities", "resume"):
            method, verb = "session/resume", "resuming"
        elif capability(capabilities, "loadSession"):
            method, verb = "session/load", "loading"
        if method is None:
            self._log(
                f"acp: the agent can neither resume nor load session {agent_session}:"
                " starting a fresh session seeded with the transcript"
            )
        else:
            self._log(f"acp: {verb} agent session {agent_session}")
            self.replaying = method == "session/load"
            try:
                self._reply = await request(method, params) or {}
                self.id, self.reopened = agent_session, True
                return
            except RemoteError as exc:
                self._log(
                    f"acp: the agent failed {method} for session {agent_session} ({exc}):"
                    " starting a fresh session seeded with the transcript"
                )
            finally:
                self.replaying = False
        await self.new(request, servers)
        self.seed = True

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        """With the style's ``_meta`` on every request that makes a session: an adapter
        builds the agent from the request that opens it, a resumed one included (claude's
        adapter would otherwise start the resumed agent with its own tools back on)."""
        meta = self.config.style.acp.session_meta if self.config.style.acp else {}
        return {**params, "_meta": meta} if meta else params

    async def configure(self, request: Request) -> None:
        reply = as_object(self._reply)
        mode = self.config.style.acp.mode if self.config.style.acp else None
        modes = as_object(reply.get("modes"))
        offered = {m.get("id") for m in modes.get("availableModes", []) if isinstance(m, dict)}
        if mode and mode in offered and modes.get("currentModeId") != mode:
            await request("session/set_mode", {"sessionId": self.id, "modeId": mode})
        model = self.config.model
        if model is None:
            return
        option = model_option(reply.get("configOptions"))
        if option is not None:
            await request("session/set_config_option", {"sessionId": self.id, "configId": option, "value": model})
            return
        try:
            await request("session/set_model", {"sessionId": self.id, "modelId": model})
        except RemoteError as exc:
            if exc.code == -32601:
                raise acp_cannot_set_model() from exc
            raise


def model_option(options: Any) -> str | None:
    """The id of the config option that picks the model (``id`` or ``category`` is
    "model"), looking inside groups too."""
    if not isinstance(options, list):
        return None
    for option in options:
        if not isinstance(option, dict):
            continue
        if option.get("id") == "model" or option.get("category") == "model":
            return str(option.get("id"))
        nested = model_option(option.get("options"))
        if nested is not None:
            return nested
    return None
