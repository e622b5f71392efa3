"""``nexusflow mcp``: the command. Declared in ``nexusflow.command`` by its path, like every
command, and kept here with the server it starts: it takes ``nexusflow run``'s flags for the
server's own agent, and checks them before it serves anything."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from ..command._invoked import check_files, client_of, tools_of
from ..command._shared import Style
from ..command.invocation import Invocation
from ..command.run import stored_flags
from ..transports.choice import Transport
from .errors import mcp_bad_address, mcp_not_loopback_without_token, mcp_token_empty

TOKEN_VARIABLE = "NEXUSFLOW_MCP_TOKEN"


async def mcp(
    *,
    http: str | None = None,
    token: str | None = None,
    read_only: bool = False,
    allow_origin: list[str] | None = None,
    tools: list[str] | None = None,
    mcp_config: Path | None = None,
    skills_dir: Path | None = None,
    script: Path | None = None,
    style: Style | None = None,
    style_file: Path | None = None,
    command: str | None = None,
    model: str | None = None,
    transport: Transport | None = None,
    acp_command: str | None = None,
    timeout: float | None = None,
    system_prompt: str | None = None,
    max_turns: int | None = None,
    max_cost_usd: float | None = None,
    max_tokens: int | None = None,
    limit: str | None = None,
    max_concurrent: int | None = None,
    per_minute: float | None = None,
    output_type: str | None = None,
) -> int:
    """Serve nexusflow to agents and editors over MCP: start, watch, answer and cancel runs.

    Over stdio unless --http is given. The agent flags (as for nexusflow run) make this
    server's own agent, which start_run runs without a deployment, each run in a background
    process of its own.

    Parameters
    ----------
    http
        Serve streamable HTTP on [HOST:]PORT (127.0.0.1 unless a host is given; port 0 picks one).
    token
        The bearer token HTTP clients must send (else NEXUSFLOW_MCP_TOKEN, else one is made and printed).
    read_only
        Serve only the tools that change nothing (get_run, list_sessions) and the transcripts.
    allow_origin
        An Origin allowed besides this server's own (a web client's page); repeatable.
    tools
        A tool, or a list of tools, for this server's agent: module:function or path/to/file.py:name.
    mcp_config
        MCP servers for this server's agent, in the mcp.json shape.
    skills_dir
        A folder of skills (SKILL.md folders) for this server's agent.
    script
        Replies (a JSON list) for the bundled scripted agent, this server's agent without --style.
    style
        This server's agent drives an agent CLI of this style.
    style_file
        ... or an agent CLI described by your own style file.
    command
        The agent CLI's path or name (with --style or --style-file).
    model
        Model for the agent CLI.
    transport
        How to drive the CLI (auto, cli or acp).
    acp_command
        The ACP adapter of styles that need one (claude, codex).
    timeout
        Seconds per CLI launch or ACP turn.
    system_prompt
        System prompt of this server's agent.
    max_turns
        Turns before a run fails without a final answer.
    max_cost_usd
        Dollars one run (with the runs nested in it) may spend.
    max_tokens
        Tokens one run (with the runs nested in it) may spend.
    limit
        Name of the subscription the model's turns count against.
    max_concurrent
        Turns of --limit in flight at once.
    per_minute
        Turns of --limit started per minute.
    output_type
        What a run's final answer must be (module:Name or path/to/file.py:Name).
    """
    from .app import build
    from .runs import Agent

    given = stored_flags(
        tools=tools,
        mcp_config=mcp_config,
        skills_dir=skills_dir,
        style=style,
        style_file=style_file,
        command=command,
        model=model,
        transport=transport,
        acp_command=acp_command,
        system_prompt=system_prompt,
        max_turns=max_turns,
        max_cost_usd=max_cost_usd,
        max_tokens=max_tokens,
        timeout=timeout,
        script=script,
        limit=limit,
        max_concurrent=max_concurrent,
        per_minute=per_minute,
        output_type=output_type,
    )
    agent = None
    if given:
        invocation = Invocation.model_validate(given)
        client_of(invocation)
        tools_of(invocation.tools)
        check_files(invocation.mcp_config, invocation.skills_dir)
        agent = Agent.of(invocation)
    address = _address(http) if http is not None else None
    server = build(agent, read_only=read_only)
    if address is None:
        await server.run_stdio_async()
        return 0
    from .http import loopback, serve_http

    host, port = address
    chosen = token if token is not None else os.environ.get(TOKEN_VARIABLE)
    if chosen is not None and not chosen.strip():
        raise mcp_token_empty()
    if chosen is None and not loopback(host):
        raise mcp_not_loopback_without_token(host)
    await serve_http(server, host, port, chosen or secrets.token_urlsafe(24), allow_origin or [], say=chosen is None)
    return 0


def _address(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT``."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") if sep else "127.0.0.1"
    port = port if sep else text
    if not port.isdigit() or not 0 <= int(port) <= 65535 or (sep and not host):
        raise mcp_bad_address(text)
    return host, int(port)
