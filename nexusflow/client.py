"""The client: a transport plus the options every client shares, and ``run``."""

from __future__ import annotations

import math
import os
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
from prefect.utilities.asyncutils import run_coro_as_sync
from pydantic import BaseModel, ConfigDict, Field

from ._runtime import PendingRun, pending_run
from .errors import CliError, SessionIdError, cli_command_required, describe
from .events import Emit, RunFinished, StreamEvent
from .flows import agent_run
from .hooks import AfterLlm, AfterTool, BeforeLlm, BeforeTool
from .messages import RunResult
from .toolkit import Toolkit
from .transports import Generate, TransportFactory, in_process_transport
from .transports.acp.transport import AcpConfig, check_cwd
from .transports.choice import Transport, agent_cli_transport
from .transports.cli import CliConfig, CliStyle, CliStyles, resolve_style

_SESSION_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class ClientOptions(BaseModel):
    """Options every client takes, whatever its transport."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", frozen=True)

    model: str | None = None
    system_prompt: str | None = None
    max_turns: int = Field(default=20, ge=1)
    before_llm: BeforeLlm | None = None
    after_llm: AfterLlm | None = None
    before_tool: BeforeTool | None = None
    after_tool: AfterTool | None = None


def new_session_id() -> str:
    return uuid.uuid4().hex


def check_session_id(session_id: str) -> str:
    """Session ids become storage paths, so they are checked before anything runs."""
    if not _SESSION_ID.match(session_id) or session_id in (".", ".."):
        raise SessionIdError(session_id)
    return session_id


class Client:
    """Runs agent runs. Build one with ``create_in_process_client`` (or, for an agent CLI,
    ``create_cli_client``); every client has the same ``run``."""

    def __init__(self, transport: TransportFactory, options: ClientOptions) -> None:
        self.transport = transport
        self.options = options

    async def run(self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None) -> RunResult:
        """Run the ``agent_run`` flow (a subflow when called inside a flow) and return its
        result. Failures are reported in the result (``status="failed"``, ``error``),
        not raised. Run again with the same ``session_id`` to resume a crashed run."""
        return await self._run(prompt, toolkit, session_id, None)

    async def stream(
        self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None
    ) -> AsyncIterator[StreamEvent]:
        """``run``, yielding events as it goes: text chunks, tool calls and their results,
        and last ``RunFinished`` with the result."""
        send, receive = anyio.create_memory_object_stream[StreamEvent](math.inf)

        async def produce() -> None:
            async with send:
                result = await self._run(prompt, toolkit, session_id, send.send_nowait)
                send.send_nowait(RunFinished(result=result))

        async with anyio.create_task_group() as group:
            group.start_soon(produce)
            async with receive:
                async for event in receive:
                    yield event

    async def _run(self, prompt: str, toolkit: Toolkit | None, session_id: str | None, emit: Emit | None) -> RunResult:
        session_id = check_session_id(session_id) if session_id is not None else new_session_id()
        pending = PendingRun(client=self, toolkit=toolkit if toolkit is not None else Toolkit(), emit=emit)
        token = pending_run.set(pending)
        try:
            state = await agent_run(prompt=prompt, session_id=session_id, return_state=True)
        finally:
            pending_run.reset(token)
        try:
            value = await state.aresult(raise_on_failure=False)
        except Exception as exc:
            value = exc
        if isinstance(value, RunResult):
            return value
        return RunResult(
            status="failed",
            error=describe(value) if isinstance(value, BaseException) else (state.message or state.name),
            session_id=session_id,
            flow_run_id=str(state.state_details.flow_run_id) if state.state_details.flow_run_id else None,
        )

    def run_sync(self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None) -> RunResult:
        """``run`` for synchronous code, including inside a synchronous ``@flow``."""
        return run_coro_as_sync(self.run(prompt, toolkit, session_id=session_id))


def create_in_process_client(generate: Generate, *, model: str | None = None, **options: Any) -> Client:
    """A client whose model is a Python callable: ``generate(request) -> reply``, sync or
    async, where a reply is a ``ModelReply``, ``{"content": ...}`` or
    ``{"tool_calls": [{"id"?, "name", "arguments"}]}``."""
    return Client(in_process_transport(generate), ClientOptions(model=model, **options))


STYLE_FIELDS = ("args", "prompt_mode", "answer", "answer_field", "tools_off", "error_markers", "model_format")


def create_cli_client(
    style: CliStyles | CliStyle,
    command: str | None = None,
    model: str | None = None,
    *,
    transport: Transport = Transport.AUTO,
    acp_command: str | None = None,
    timeout: float = 300.0,
    env: dict[str, str] | None = None,
    workspace: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    repair_budget: int = 2,
    **options: Any,
) -> Client:
    """A client whose model is the user's own agent CLI.

    ``command`` is the CLI's path or name: required, nexusflow never picks a binary.
    ``transport``: ``AUTO`` keeps one warm ACP session per run when the style declares an
    ACP launch and the binary answers ``initialize``, else launches the CLI once per turn;
    ``ACP`` or ``CLI`` force one. Styles whose ACP comes from an adapter (claude, codex) take
    its path as ``acp_command``. ``env`` adds environment for the CLI (``${VAR}`` expanded at
    launch, never logged); over ACP the agent gets only a minimal base environment plus the
    style's and this. ``timeout`` bounds one launch or one ACP turn. ``workspace`` bounds
    where the ACP session may run, ``cwd`` (inside it) is where it runs. ``repair_budget``
    is how many times a malformed one-shot reply is sent back with its complaint. With
    ``style=CliStyles.CUSTOM`` pass the style's fields (``args``, ``prompt_mode``, ...) as
    keywords. Every other keyword is a client option, as for ``create_in_process_client``.
    """
    fields = {key: options.pop(key) for key in STYLE_FIELDS if key in options}
    chosen = resolve_style(style, fields, model)
    if not command:
        raise cli_command_required()
    if not isinstance(transport, Transport):
        raise CliError(f"cli: transport must be a Transport member, got {transport!r}")
    cli = CliConfig(
        style=chosen,
        command=command,
        model=model,
        timeout=timeout,
        env=env or {},
        cwd=os.fspath(cwd) if cwd is not None else None,
        repair_budget=repair_budget,
    )
    acp, why_not = _acp_config(chosen, command, acp_command, model, timeout, env, workspace, cwd, transport)
    return Client(agent_cli_transport(transport, cli, acp, why_not), ClientOptions(model=model, **options))


def _acp_config(
    style: CliStyle,
    command: str,
    acp_command: str | None,
    model: str | None,
    timeout: float,
    env: dict[str, str] | None,
    workspace: str | os.PathLike[str] | None,
    cwd: str | os.PathLike[str] | None,
    transport: Transport,
) -> tuple[AcpConfig | None, str]:
    """The ACP launch for this client, or None and the reason there is none."""
    if transport is Transport.CLI:
        return None, "the client asked for the one-shot transport"
    if style.acp is None:
        return None, f'style "{style.name}" declares no ACP launch'
    if style.acp.adapter and not acp_command:
        return None, f'style "{style.name}" speaks ACP through an adapter: pass its path as acp_command'
    root, where = check_cwd(workspace or cwd or os.getcwd(), cwd or workspace or os.getcwd())
    config = AcpConfig(
        style=style,
        command=acp_command or command,
        model=model,
        timeout=timeout,
        env=env or {},
        workspace=root,
        cwd=where,
    )
    return config, ""
