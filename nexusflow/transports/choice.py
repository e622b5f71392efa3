"""Which transport drives an agent CLI: ACP when the style declares an ACP launch and the
binary answers ``initialize``, else the one-shot transport. The choice is made when a run
opens its transport, and logged with its reason."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from enum import StrEnum
from typing import Any

from .._support.secrets import get_logger
from ..errors import AcpError
from .acp.transport import AcpConfig, AcpTransport, check_cwd
from .base import Log, ModelTransport, TransportFactory
from .cassette import Cassette, active_cassette
from .errors import (
    acp_unavailable,
    cli_command_required,
    cli_transport_unknown,
    no_acp_adapter,
    no_acp_asked,
    no_acp_declared,
    no_acp_in_cassette,
)
from .oneshot.process import MAX_OUTPUT
from .oneshot.style import CliStyle, CliStyles
from .oneshot.transport import CliConfig, CliTransport, resolve_style
from .retry_on import retry_patterns

AUTO_HANDSHAKE_TIMEOUT = 20.0
"""How long AUTO waits for ``initialize`` before it settles for the one-shot transport."""


class Transport(StrEnum):
    AUTO = "auto"
    ACP = "acp"
    CLI = "cli"


logger = get_logger("nexusflow.transport")


def agent_cli_transport(
    style: CliStyles | CliStyle,
    command: str | None,
    model: str | None = None,
    *,
    transport: Transport = Transport.AUTO,
    acp_command: str | None = None,
    timeout: float = 300.0,
    retry_on: str | Sequence[str] = (),
    env: dict[str, str] | None = None,
    workspace: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    repair_budget: int = 2,
    max_output: int = MAX_OUTPUT,
    fields: dict[str, Any] | None = None,
    cassette: Cassette | None = None,
) -> TransportFactory:
    """The transport factory of an agent CLI, checked before anything runs (the style
    against the model, the command, the ACP launch); see ``create_cli_client``."""
    chosen = resolve_style(style, fields or {}, model)
    if not command:
        raise cli_command_required()
    if not isinstance(transport, Transport):
        raise cli_transport_unknown(transport)
    patterns = retry_patterns(retry_on)
    cli = CliConfig(
        style=chosen,
        command=command,
        model=model,
        timeout=timeout,
        retry_on=patterns,
        env=env or {},
        cwd=os.fspath(cwd) if cwd is not None else None,
        repair_budget=repair_budget,
        max_output=max_output,
    )
    acp, why_not = _acp_config(chosen, command, acp_command, model, timeout, env, workspace, cwd, transport)
    if acp is not None:
        acp = acp.model_copy(update={"retry_on": patterns})
    return _choose(transport, cli, acp, why_not, cassette)


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
        return None, no_acp_asked()
    if style.acp is None:
        return None, no_acp_declared(style.name)
    if style.acp.adapter and not acp_command:
        return None, no_acp_adapter(style.name)
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


def _choose(
    choice: Transport, cli: CliConfig, acp: AcpConfig | None, why_not: str, cassette: Cassette | None
) -> TransportFactory:
    """``acp`` is None when ACP cannot be used, and ``why_not`` says why. A cassette (the
    client's, else the one in use when the run opens its transport) records the transport
    chosen, or replays it with no process: AUTO then takes ACP when the cassette holds an ACP
    session of the client's style, else the one-shot transport."""

    @asynccontextmanager
    async def open_transport(log: Log | None = None) -> AsyncIterator[ModelTransport]:
        say = log or logger.info
        style = cli.style.name
        tape = cassette or active_cassette()
        if tape is not None:
            say(f"cassette: {'replaying' if tape.replaying else 'recording'} {tape.path}")
        agent: AcpTransport | None = None
        if choice is Transport.ACP:
            if acp is None:
                raise acp_unavailable(why_not)
            agent = AcpTransport(acp, tape)
            await agent.start(say)
        elif choice is Transport.AUTO and acp is not None and tape is not None and tape.replaying:
            if tape.has_acp(style):
                agent = AcpTransport(acp, tape)
                await agent.start(say)
            else:
                say(f"transport: one-shot CLI for {style}, because {no_acp_in_cassette(tape.path)}")
        elif choice is Transport.AUTO and acp is not None:
            candidate = AcpTransport(acp.model_copy(update={"handshake_timeout": AUTO_HANDSHAKE_TIMEOUT}), tape)
            try:
                await candidate.start(say)
                agent = candidate
            except AcpError as exc:
                say(f"transport: one-shot CLI for {style}, because ACP did not start: {exc}")
        elif choice is Transport.AUTO:
            say(f"transport: one-shot CLI for {style}, because {why_not}")
        if agent is None:
            yield CliTransport(cli, tape)
            return
        say(f"transport: ACP for {style} ({acp.command if acp else ''})")
        try:
            yield agent
        finally:
            await agent.close()

    return open_transport
