"""``nexusflow run``: a prompt, a session run again, or (``--answer``) a pending one answered."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
from cyclopts import Parameter

from .._prefect.server import use_server
from ..client import Client, new_session_id
from ..config.run_flags import RUN_FLAGS
from ..state.store import SessionStore, read_inputs
from ..tasks.live_run import when_held
from ..transports.choice import Transport
from ._invoked import check_files, client_of, toolkit_of, tools_of
from ._shared import Style, answer_json, checked_session_id, command_name, finish
from .answer import answer_session
from .errors import (
    usage_answer_with_prompt,
    usage_answer_without_session,
    usage_empty_prompt,
    usage_no_prompt,
    usage_no_prompt_stored,
)
from .invocation import Invocation, absolute, absolute_command, absolute_tool, load_invocation, save_invocation

T = TypeVar("T")

Deprecated = Annotated[T | None, Parameter(show=False)]
"""A flag's earlier spelling: taken, left out of the help, and warned about (``renamed``)."""


def renamed(was: str, value: T | None, now: T | None) -> T | None:
    """The value of a flag given in its earlier spelling, with a warning naming the new one
    (the flag in its one spelling wins when both are given)."""
    if value is None:
        return now
    (flag,) = [flag for flag in RUN_FLAGS if flag.was == was]
    print(f"nexusflow: --{was} is deprecated: use --{flag.name.replace('_', '-')}", file=sys.stderr)
    return value if now is None else now


async def run(
    prompt: str | None = None,
    /,
    *,
    tools: list[str] | None = None,
    mcp_config: Path | None = None,
    skills_dir: Path | None = None,
    session: str | None = None,
    script: Path | None = None,
    style: Style | None = None,
    style_file: Path | None = None,
    command: str | None = None,
    model: str | None = None,
    transport: Transport | None = None,
    acp_command: str | None = None,
    timeout: float | None = None,
    system_prompt: str | None = None,
    answer: Literal["approve", "deny"] | None = None,
    answer_data: str | None = None,
    answer_reason: str | None = None,
    max_turns: int | None = None,
    max_cost_usd: float | None = None,
    max_tokens: int | None = None,
    limit: str | None = None,
    max_concurrent: int | None = None,
    per_minute: float | None = None,
    output_type: str | None = None,
    mcp: Deprecated[Path] = None,
    skills: Deprecated[Path] = None,
    system: Deprecated[str] = None,
    data: Deprecated[str] = None,
    reason: Deprecated[str] = None,
) -> int:
    """Run an agent on a prompt, or answer a pending run.

    Parameters
    ----------
    prompt
        The prompt (not needed with --answer).
    tools
        A tool, or a list of tools, to offer: module:function or path/to/file.py:name; repeatable.
    mcp_config
        MCP servers, in the mcp.json shape.
    skills_dir
        A folder of skills (SKILL.md folders).
    session
        Session id; the same id resumes a crashed run.
    script
        Replies (a JSON list) for the bundled scripted agent, the model without --style; without
        --script it follows ``call NAME {json}`` lines in the prompt.
    style
        Drive an agent CLI of this style.
    style_file
        Drive an agent CLI described by your own style file.
    command
        The agent CLI's path or name (with --style or --style-file).
    model
        Model for the agent CLI.
    transport
        How to drive the CLI: ACP when the style declares it and the binary answers (auto, the
        default unless NEXUSFLOW_TRANSPORT says otherwise), or force one.
    acp_command
        The ACP adapter of styles that need one (claude, codex).
    timeout
        Seconds per CLI launch or ACP turn (default: NEXUSFLOW_TIMEOUT, else 300).
    system_prompt
        System prompt.
    answer
        Answer the pending run of --session, and let it go on with the flags it was started
        with (flags given here replace them).
    answer_data
        JSON handed to the tool with the answer.
    answer_reason
        Why, with the answer.
    max_turns
        Turns before the run fails without a final answer (default: NEXUSFLOW_MAX_TURNS, else 20).
    max_cost_usd
        Dollars the run and the runs nested in it may spend together, by the costs the CLI
        reports; the run stops before its next turn once they reach it.
    max_tokens
        Tokens (in + out) the run and the runs nested in it may spend together.
    limit
        Name of the subscription the model's turns count against, on every machine of the server.
    max_concurrent
        Turns of --limit in flight at once.
    per_minute
        Turns of --limit started per minute.
    output_type
        What the final answer must be (module:Name or path/to/file.py:Name, a pydantic model or
        any type pydantic validates); stdout is then the validated value as one line of JSON.
    """
    mcp_config = renamed("mcp", mcp, mcp_config)
    skills_dir = renamed("skills", skills, skills_dir)
    system_prompt = renamed("system", system, system_prompt)
    answer_data = renamed("data", data, answer_data)
    answer_reason = renamed("reason", reason, answer_reason)
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
    if answer is not None:
        if prompt is not None:
            raise usage_answer_with_prompt()
        if session is None:
            raise usage_answer_without_session()
        ok = answer == "approve"
        return await answer_session(checked_session_id(session), given, ok, answer_json(answer_data), answer_reason)
    if prompt is None and session is not None:
        return await _run_again(checked_session_id(session), given)
    if prompt is None:
        raise usage_no_prompt()
    if not prompt.strip():
        raise usage_empty_prompt()
    invocation = Invocation.model_validate(given)
    client = client_of(invocation)
    session_id = checked_session_id(session) if session is not None else new_session_id()
    kit = tools_of(tools or [])  # as typed, for messages; stored absolute
    check_files(invocation.mcp_config, invocation.skills_dir)
    use_server()
    if session is not None:
        await _say_if_another_prompt(session_id, prompt)
    return await _run_session(client, invocation, kit, prompt, session_id)


def stored_flags(
    *,
    tools: list[str] | None,
    mcp_config: Path | None,
    skills_dir: Path | None,
    style: Style | None,
    style_file: Path | None,
    command: str | None,
    model: str | None,
    transport: Transport | None,
    acp_command: str | None,
    system_prompt: str | None,
    max_turns: int | None,
    max_cost_usd: float | None,
    max_tokens: int | None,
    timeout: float | None,
    script: Path | None,
    limit: str | None,
    max_concurrent: int | None,
    per_minute: float | None,
    output_type: str | None,
) -> dict[str, Any]:
    """The flags given, as a session's invocation keeps them: paths absolute, since the
    session may go on from another directory (``nexusflow mcp`` takes the same)."""
    given = {
        "tools": [absolute_tool(spec) for spec in tools] if tools is not None else None,
        "mcp_config": absolute(mcp_config),
        "skills_dir": absolute(skills_dir),
        "style": style,
        "style_file": absolute(style_file),
        "command": absolute_command(command),
        "model": model,
        "transport": transport,
        "acp_command": absolute_command(acp_command),
        "system_prompt": system_prompt,
        "max_turns": max_turns,
        "max_cost_usd": max_cost_usd,
        "max_tokens": max_tokens,
        "timeout": timeout,
        "script": absolute(script),
        "limit": limit,
        "max_concurrent": max_concurrent,
        "per_minute": per_minute,
        "output_type": absolute_tool(output_type) if output_type is not None else None,
    }
    return {flag: value for flag, value in given.items() if value is not None}


async def _run_session(client: Client, invocation: Invocation, kit: list[Any], prompt: str, session_id: str) -> int:
    """The run; Ctrl-C says how to go on with it. The invocation is stored by the run once it
    holds the session: a start that is refused leaves the live session's as it was."""
    try:
        async with await toolkit_of(kit, invocation) as toolkit:
            with when_held(partial(save_invocation, session_id, invocation)):
                result = await client.run(prompt, toolkit, session_id=session_id)
    except (KeyboardInterrupt, SystemExit, anyio.get_cancelled_exc_class()):  # Ctrl-C, or a tool that raised it
        print(f"nexusflow: interrupted; go on with: {command_name()} run --session {session_id}", file=sys.stderr)
        raise
    return await finish(result, client)


async def _run_again(session_id: str, given: dict[str, Any]) -> int:
    """``run --session ID`` without a prompt: the session's stored prompt and flags, its
    finished steps replayed."""
    use_server()
    stored = await load_invocation(session_id)
    state = await SessionStore().get(session_id)
    record = await read_inputs(session_id, state.inputs) if state is not None else None
    if stored is None or record is None:
        raise usage_no_prompt_stored(session_id)
    invocation = stored.over(given)
    client = client_of(invocation)
    check_files(invocation.mcp_config, invocation.skills_dir)
    return await _run_session(client, invocation, tools_of(invocation.tools), record.prompt, session_id)


async def _say_if_another_prompt(session_id: str, prompt: str) -> None:
    """A session run again with another prompt starts anew: its steps' keys follow the prompt."""
    state = await SessionStore().get(session_id)
    record = await read_inputs(session_id, state.inputs) if state is not None else None
    if record is not None and record.prompt != prompt:
        print(
            f"nexusflow: session {session_id} ran another prompt before: this run starts it anew"
            " (nothing of the earlier run replays)",
            file=sys.stderr,
        )
