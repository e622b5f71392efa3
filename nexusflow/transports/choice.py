"""Which transport drives an agent CLI: ACP when the style declares an ACP launch and the
binary answers ``initialize``, else the one-shot transport. The choice is made when a run
opens its transport, and logged with its reason."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import StrEnum

from .._secrets import get_logger
from ..errors import AcpError
from .acp.transport import AcpConfig, AcpTransport
from .base import Log, ModelTransport, TransportFactory
from .cli.transport import CliConfig, CliTransport

AUTO_HANDSHAKE_TIMEOUT = 20.0
"""How long AUTO waits for ``initialize`` before it settles for the one-shot transport."""


class Transport(StrEnum):
    AUTO = "auto"
    ACP = "acp"
    CLI = "cli"


logger = get_logger("nexusflow.transport")


def agent_cli_transport(choice: Transport, cli: CliConfig, acp: AcpConfig | None, why_not: str) -> TransportFactory:
    """``acp`` is None when ACP cannot be used, and ``why_not`` says why."""

    @asynccontextmanager
    async def open_transport(log: Log | None = None) -> AsyncIterator[ModelTransport]:
        say = log or logger.info
        style = cli.style.name
        agent: AcpTransport | None = None
        if choice is Transport.ACP:
            if acp is None:
                raise AcpError(f"acp: {why_not}")
            agent = AcpTransport(acp)
            await agent.start(say)
        elif choice is Transport.AUTO and acp is not None:
            candidate = AcpTransport(acp.model_copy(update={"handshake_timeout": AUTO_HANDSHAKE_TIMEOUT}))
            try:
                await candidate.start(say)
                agent = candidate
            except AcpError as exc:
                say(f"transport: one-shot CLI for {style}, because ACP did not start: {exc}")
        elif choice is Transport.AUTO:
            say(f"transport: one-shot CLI for {style}, because {why_not}")
        if agent is None:
            yield CliTransport(cli)
            return
        say(f"transport: ACP for {style} ({acp.command if acp else ''})")
        try:
            yield agent
        finally:
            await agent.close()

    return open_transport
