"""The ACP transport: one warm agent process per flow run, our toolkit served to it as an
MCP server, one ``session/prompt`` per model turn.

The agent calls our tools natively; each call arrives at the served MCP server and goes to
the turn's ``call_tool`` (the flow makes it the same keyed tool task the loop would run),
so a resumed turn does not run a finished tool again. Nothing here knows Prefect.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup
from pydantic import BaseModel, ConfigDict, Field

from ..._env import expand_all
from ...errors import AcpError, acp_timed_out, describe
from ...events import TextChunk, ThoughtChunk, ToolCallFinished, ToolCallStarted
from ...messages import (
    AssistantMessage,
    Message,
    ModelReply,
    ModelRequest,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolSpec,
    TurnStats,
    Usage,
    UserMessage,
)
from ...suspension import Suspended
from ..base import Remember, TurnScope
from ..cli.process import kill_group
from ..cli.style import CliStyle
from .bridge import TOKEN_VARIABLE
from .connection import Connection, MethodNotFound, RemoteError, as_object
from .permissions import CANCELLED, choose, identify
from .served import ServedToolkit, serve_toolkit

logger = logging.getLogger("nexusflow.acp")

PROTOCOL_VERSION = 1
CLIENT_CAPABILITIES: dict[str, Any] = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
"""Honest: nexusflow serves no file system and no terminal to the agent, so it claims none."""

BASE_ENVIRONMENT = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR", "TZ", "SHELL")
"""The parent's variables an agent gets; everything else must be given explicitly."""

_STDERR_LOG_LINES = 500


class AcpConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    style: CliStyle
    command: str
    model: str | None = None
    timeout: float = Field(default=300.0, gt=0, description="Seconds one turn (one session/prompt) may take.")
    env: dict[str, str] = Field(default_factory=dict)
    workspace: str
    cwd: str
    handshake_timeout: float = Field(default=60.0, gt=0)
    cancel_grace: float = Field(default=5.0, ge=0)
    quiet_period: float = Field(
        default=0.02,
        ge=0,
        description="Updates that follow a prompt's response still count until the agent has been quiet this long"
        " (at most ten times as long in all).",
    )


def check_cwd(workspace: str | os.PathLike[str], cwd: str | os.PathLike[str]) -> tuple[str, str]:
    """Both as absolute resolved paths; the cwd must resolve (symlinks included) inside the workspace."""
    root = Path(workspace).resolve()
    where = Path(cwd).resolve()
    if not where.is_relative_to(root):
        raise AcpError(f"acp: the session cwd {cwd} resolves to {where}, outside the workspace {root}")
    return str(root), str(where)


def check_protocol_version(reply: Any) -> dict[str, Any]:
    """Only the JSON integer 1 is agreement; a string, a boolean, 1.5 or 2 is not."""
    if not isinstance(reply, dict):
        raise AcpError(f"acp: initialize answered {type(reply).__name__}, not an object")
    version = reply.get("protocolVersion")
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise AcpError(
            f"acp: the agent answered protocolVersion {json.dumps(version)}; nexusflow speaks {PROTOCOL_VERSION}"
        )
    return reply


def capability(capabilities: Any, *path: str) -> bool:
    """An absent capability is false, and so is anything but JSON true or an object (the
    spec declares some capabilities, such as ``sessionCapabilities.resume``, as objects)."""
    value = capabilities
    for key in path:
        if not isinstance(value, dict):
            return False
        value = value.get(key)
    return value is True or isinstance(value, dict)


def _text_of(content: Any) -> str:
    if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
        return str(content["text"])
    return ""


def _prompt_text(messages: list[Message], whole: bool) -> str:
    """What the agent has not seen yet: everything for a fresh session, else what follows
    the last assistant message."""
    if not whole:
        last = max((i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)), default=-1)
        messages = messages[last + 1 :]
    parts: list[str] = []
    for message in messages:
        if isinstance(message, SystemMessage | UserMessage):
            parts.append(message.content)
        elif isinstance(message, AssistantMessage) and message.content:
            parts.append(f"(your earlier answer) {message.content}")
        elif isinstance(message, ToolMessage):
            parts.append(f"(tool result {message.tool_call_id}) {message.content}")
    return "\n\n".join(parts)


@dataclass
class _Turn:
    scope: TurnScope
    text: list[str] = field(default_factory=list)
    steps: list[Message] = field(default_factory=list)
    stats: TurnStats = field(default_factory=TurnStats)
    seen: dict[str, int] = field(default_factory=dict)
    suspended: Suspended | None = None
    stop: anyio.Event = field(default_factory=anyio.Event)

    def position(self, name: str, arguments: dict[str, Any]) -> tuple[int, str]:
        """The n-th call with this name and these arguments in the turn, and an id made
        from them: a resumed turn finds its finished calls however parallel calls interleave."""
        digest = hashlib.sha256(json.dumps([name, arguments], sort_keys=True).encode()).hexdigest()[:8]
        occurrence = self.seen.get(digest, 0)
        self.seen[digest] = occurrence + 1
        return occurrence, f"served_{self.scope.step}_{digest}_{occurrence}"


class AcpTransport:
    """Lives for one flow run: ``start`` spawns the agent and shakes hands, ``begin`` opens
    (or resumes) the session with the served toolkit, ``generate`` runs one prompt."""

    def __init__(self, config: AcpConfig) -> None:
        self.config = config
        self.capabilities: dict[str, Any] = {}
        self.session_id: str | None = None
        self.updates: list[dict[str, Any]] = []
        self.unknown_updates: list[str] = []
        self._stack = AsyncExitStack()
        self._process: Process | None = None
        self._group: TaskGroup | None = None
        self._connection: Connection | None = None
        self._served: ServedToolkit | None = None
        self._turn: _Turn | None = None
        self._announced: dict[str, dict[str, Any]] = {}
        self._cancelling = False
        self._seed = False
        self._replaying = False
        self._stderr_lines = 0
        self._has_prompted = False
        self._session_reply: Any = None
        self._log: Callable[[str], None] = logger.info

    # ---- process and handshake -----------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        launch = self.config.style.acp
        base = {key: os.environ[key] for key in BASE_ENVIRONMENT if key in os.environ}
        return {**base, **expand_all(launch.env if launch else {}), **expand_all(self.config.env)}

    async def start(self, log: Callable[[str], None] | None = None) -> None:
        if log is not None:
            self._log = log
        launch = self.config.style.acp
        argv = [self.config.command, *(launch.args if launch else [])]
        try:
            self._process = await anyio.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._environment(),
                cwd=self.config.cwd,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise AcpError(f"acp: command not found: {self.config.command}") from exc
        except PermissionError as exc:
            raise AcpError(f"acp: cannot run {self.config.command}: permission denied") from exc
        self._stack.push_async_callback(self._stop_process)
        self._group = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(self._group.cancel_scope.cancel)
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        self._connection = Connection(
            process.stdin,
            process.stdout,
            process.stderr,
            on_request=self._on_request,
            on_notification=self._on_notification,
            on_stderr=self._on_stderr,
        )
        self._connection.start(self._group)
        try:
            with anyio.fail_after(self.config.handshake_timeout):
                reply = await self._connection.request(
                    "initialize",
                    {
                        "protocolVersion": PROTOCOL_VERSION,
                        "clientCapabilities": CLIENT_CAPABILITIES,
                        "clientInfo": {"name": "nexusflow", "version": _version()},
                    },
                )
        except TimeoutError:
            await self.close()
            raise AcpError(
                f"acp: {self.config.command} did not answer initialize within {self.config.handshake_timeout:g}s"
            ) from None
        except AcpError as exc:
            await self.close()
            raise AcpError(f"{exc}{await self._exit_detail()}") from exc
        try:
            self.capabilities = check_protocol_version(reply).get("agentCapabilities") or {}
        except AcpError:
            await self.close()
            raise

    async def _exit_detail(self) -> str:
        """How the agent ended, once it has: its exit status and the end of its stderr."""
        if self._process is not None:
            with anyio.move_on_after(2):
                await self._process.wait()
        code = self._process.returncode if self._process is not None else None
        said = self._connection.stderr_text() if self._connection is not None else ""
        detail = f" (exit {code})" if code is not None else ""
        return f"{detail}: {said}" if said else detail

    async def _stop_process(self) -> None:
        process = self._process
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()
            with anyio.move_on_after(1):
                await process.wait()
            kill_group(process.pid)
            await process.aclose()

    async def close(self) -> None:
        self._cancelling = True
        await self._stack.aclose()

    def _on_stderr(self, line: str) -> None:
        self._stderr_lines += 1
        if self._stderr_lines <= _STDERR_LOG_LINES:
            self._log(f"agent stderr: {line}")
        elif self._stderr_lines == _STDERR_LOG_LINES + 1:
            self._log(f"agent stderr: more than {_STDERR_LOG_LINES} lines; the rest are not logged")

    # ---- what the agent asks of us -------------------------------------------------------

    async def _on_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            return self._decide(params)
        raise MethodNotFound(method)

    def _decide(self, params: dict[str, Any]) -> dict[str, Any]:
        if self._cancelling:
            return CANCELLED
        tool_call = as_object(params.get("toolCall"))
        call_id = tool_call.get("toolCallId")
        announced = self._announced.get(call_id, {}) if isinstance(call_id, str) else {}
        served = self._served
        tool = None
        if served is not None:
            tool = identify(tool_call, served.name, served.tools) or identify(announced, served.name, served.tools)
        outcome = choose(params.get("options"), allow=tool is not None)
        verdict = f"allowed ({tool})" if tool else "rejected"
        self._log(f"acp: permission for {tool_call.get('title') or call_id}: {verdict}")
        return outcome

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method != "session/update":
            logger.debug("acp: ignoring notification %s", method)
            return
        update = as_object(params.get("update"))
        kind = update.get("sessionUpdate")
        self.updates.append(update)
        turn = None if self._replaying else self._turn
        emit = turn.scope.emit if turn is not None else None
        if kind == "agent_message_chunk":
            text = _text_of(update.get("content"))
            if turn is not None and text:
                turn.text.append(text)
                if emit:
                    emit(TextChunk(step=turn.scope.step, text=text))
        elif kind == "agent_thought_chunk":
            text = _text_of(update.get("content"))
            if turn is not None and text and emit:
                emit(ThoughtChunk(step=turn.scope.step, text=text))
        elif kind in ("tool_call", "tool_call_update"):
            call_id = update.get("toolCallId")
            if isinstance(call_id, str):
                self._announced[call_id] = {**self._announced.get(call_id, {}), **update}
        elif kind not in _KNOWN_UPDATES:
            self.unknown_updates.append(str(kind))
            logger.info("acp: ignoring an update of unknown kind %r", kind)

    # ---- the served toolkit --------------------------------------------------------------

    async def _call_served(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        turn = self._turn
        call_tool = turn.scope.call_tool if turn is not None else None
        if turn is None or call_tool is None:
            return ToolResult(content=f'error: tool "{name}" was called outside a turn', is_error=True)
        scope = turn.scope
        index, call_id = turn.position(name, arguments)
        call = ToolCall.model_validate({"id": call_id, "name": name, "arguments": arguments})
        if scope.emit:
            scope.emit(ToolCallStarted(step=scope.step, call=call))
        started = time.perf_counter()
        try:
            outcome = await call_tool(index, call)
        except Suspended as exc:
            # No wait_for: the run must end pending, so this turn ends here; the resumed run
            # reopens the agent's session and finds this call answered.
            turn.suspended = exc
            turn.stop.set()
            return ToolResult(
                content=f"pending: {exc.request.prompt} (the turn ends until it is answered)", is_error=True
            )
        turn.stats.tool_calls += 1
        turn.stats.tool_errors += outcome.result.is_error
        turn.stats.suspensions += outcome.suspended
        if outcome.replayed:
            turn.stats.replayed_tool_calls += 1
        else:
            turn.stats.tool_seconds += time.perf_counter() - started
        turn.steps += [
            AssistantMessage(tool_calls=[call]),
            ToolMessage(tool_call_id=call.id, content=outcome.result.content),
        ]
        if scope.emit:
            scope.emit(ToolCallFinished(step=scope.step, call=call, result=outcome.result))
        return outcome.result

    def _mcp_servers(self) -> list[dict[str, Any]]:
        served = self._served
        assert served is not None
        if capability(self.capabilities, "mcpCapabilities", "http"):
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

    # ---- the session ---------------------------------------------------------------------

    async def begin(self, remember: Remember, tools: list[ToolSpec]) -> None:
        self._served = await self._stack.enter_async_context(serve_toolkit(tools, self._call_served))
        agent_session, replayed = await remember("acp-session", {"style": self.config.style.name}, self._new_session)
        if replayed:
            await self._reopen(agent_session)
        await self._configure()

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        assert self._connection is not None
        try:
            return await self._connection.request(method, params)
        except AcpError as exc:
            if isinstance(exc, RemoteError):
                raise
            raise AcpError(f"{exc}{await self._exit_detail()}") from exc

    async def _new_session(self) -> str:
        reply = await self._request("session/new", {"cwd": self.config.cwd, "mcpServers": self._mcp_servers()})
        session_id = reply.get("sessionId") if isinstance(reply, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise AcpError("acp: session/new answered no sessionId")
        self.session_id = session_id
        self._session_reply = reply
        return session_id

    async def _reopen(self, agent_session: str) -> None:
        """Resume if advertised, else load if advertised, else (or when the agent fails to)
        a fresh session seeded with the transcript; the log says which, never silently.
        Finished tool calls replay from storage whatever the agent remembers."""
        params = {"sessionId": agent_session, "cwd": self.config.cwd, "mcpServers": self._mcp_servers()}
        method = None
        if capability(self.capabilities, "sessionCapabilities", "resume"):
            method, verb = "session/resume", "resuming"
        elif capability(self.capabilities, "loadSession"):
            method, verb = "session/load", "loading"
        if method is None:
            self._log(
                f"acp: the agent can neither resume nor load session {agent_session}:"
                " starting a fresh session seeded with the transcript"
            )
        else:
            self._log(f"acp: {verb} agent session {agent_session}")
            self._replaying = method == "session/load"
            try:
                self._session_reply = await self._request(method, params) or {}
                self.session_id = agent_session
                return
            except RemoteError as exc:
                self._log(
                    f"acp: the agent failed {method} for session {agent_session} ({exc}):"
                    " starting a fresh session seeded with the transcript"
                )
            finally:
                self._replaying = False
        await self._new_session()
        self._seed = True

    async def _configure(self) -> None:
        reply = as_object(self._session_reply)
        mode = self.config.style.acp.mode if self.config.style.acp else None
        modes = as_object(reply.get("modes"))
        offered = {m.get("id") for m in modes.get("availableModes", []) if isinstance(m, dict)}
        if mode and mode in offered and modes.get("currentModeId") != mode:
            await self._request("session/set_mode", {"sessionId": self.session_id, "modeId": mode})
        model = self.config.model
        if model is None:
            return
        option = _model_option(reply.get("configOptions"))
        if option is not None:
            await self._request(
                "session/set_config_option", {"sessionId": self.session_id, "configId": option, "value": model}
            )
            return
        try:
            await self._request("session/set_model", {"sessionId": self.session_id, "modelId": model})
        except RemoteError as exc:
            if exc.code == -32601:
                raise AcpError(
                    "acp: the agent has no model config option and no session/set_model: drop the model"
                    " or choose it in the agent's own settings"
                ) from exc
            raise

    async def generate(self, request: ModelRequest, scope: TurnScope | None = None) -> ModelReply:
        """One ``session/prompt``. On timeout: ``session/cancel``, a grace period, then the
        whole process group is killed."""
        text = _prompt_text(request.messages, whole=self._seed or not self._has_prompted)
        turn = self._turn = _Turn(scope=scope or TurnScope(step=0))
        self._has_prompted = True
        done = anyio.Event()
        outcome: dict[str, Any] = {}

        async def prompt() -> None:
            assert self._connection is not None
            try:
                outcome["reply"] = await self._connection.request(
                    "session/prompt", {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}
                )
            except Exception as exc:
                outcome["error"] = exc
            finally:
                done.set()

        assert self._group is not None
        self._group.start_soon(prompt)
        timed_out = False
        try:
            with anyio.move_on_after(self.config.timeout):
                await _first_of(done, turn.stop)
            timed_out = turn.suspended is None and not done.is_set()
        finally:
            if not done.is_set():
                with anyio.CancelScope(shield=True):
                    await self._cancel(done)
            self._seed = False
        if timed_out:
            self._turn = None
            stop = as_object(outcome.get("reply")).get("stopReason")
            how = (
                f"the agent ended the turn: {stop}"
                if stop
                else "the agent did not answer; its process group was killed"
            )
            raise AcpError(f"{acp_timed_out(round(self.config.timeout * 1000))} ({how})")
        if turn.suspended is not None:
            self._turn = None
            raise turn.suspended
        if "error" in outcome:
            self._turn = None
            error = outcome["error"]
            if isinstance(error, AcpError) and not isinstance(error, RemoteError):
                raise AcpError(f"acp: the agent exited during the turn{await self._exit_detail()}") from error
            raise error if isinstance(error, AcpError) else AcpError(f"acp: session/prompt failed: {describe(error)}")
        await self._await_quiet()
        self._turn = None
        return self._reply(turn, outcome.get("reply"))

    async def _await_quiet(self) -> None:
        """Let updates the agent sent just after its response join the turn."""
        deadline = time.monotonic() + 10 * self.config.quiet_period
        while time.monotonic() < deadline:
            seen = len(self.updates)
            await anyio.sleep(self.config.quiet_period)
            if len(self.updates) == seen:
                return

    async def _cancel(self, done: anyio.Event) -> None:
        self._cancelling = True
        try:
            if self._connection is not None:
                try:
                    await self._connection.notify("session/cancel", {"sessionId": self.session_id})
                except AcpError:
                    pass
            with anyio.move_on_after(self.config.cancel_grace):
                await done.wait()
            if not done.is_set() and self._process is not None:
                kill_group(self._process.pid)
        finally:
            self._cancelling = False

    def _reply(self, turn: _Turn, answer: Any) -> ModelReply:
        reply = as_object(answer)
        stop = reply.get("stopReason")
        stop_reason = stop if isinstance(stop, str) else None
        if stop_reason not in _KNOWN_STOP_REASONS:
            logger.info("acp: the turn ended with an unknown stop reason %r", stop)
        usage = as_object(reply.get("usage"))
        turn.stats.stop_reason = stop_reason
        turn.stats.streamed = True
        return ModelReply(
            content="".join(turn.text),
            usage=Usage(
                input_tokens=int(usage.get("inputTokens") or 0), output_tokens=int(usage.get("outputTokens") or 0)
            ),
            stats=turn.stats,
            steps=turn.steps,
        )


async def _first_of(*events: anyio.Event) -> None:
    async def wait(event: anyio.Event, scope: anyio.CancelScope) -> None:
        await event.wait()
        scope.cancel()

    async with anyio.create_task_group() as group:
        for event in events:
            group.start_soon(wait, event, group.cancel_scope)


_KNOWN_UPDATES = {
    "agent_message_chunk",
    "agent_thought_chunk",
    "user_message_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "available_commands_update",
    "current_mode_update",
    "config_option_update",
    "session_info_update",
    "usage_update",
}
_KNOWN_STOP_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}


def _model_option(options: Any) -> str | None:
    """The id of the config option that picks the model (``id`` or ``category`` is
    "model"), looking inside groups too."""
    if not isinstance(options, list):
        return None
    for option in options:
        if not isinstance(option, dict):
            continue
        if option.get("id") == "model" or option.get("category") == "model":
            return str(option.get("id"))
        nested = _model_option(option.get("options"))
        if nested is not None:
            return nested
    return None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nexusflow")
    except PackageNotFoundError:
        return "0"
