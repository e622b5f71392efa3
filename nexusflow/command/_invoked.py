"""The client and the toolkit a session's invocation describes, every mistake in it a usage
error found before Prefect starts."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..cli_client import create_cli_client
from ..client import Client, create_in_process_client
from ..config._imports import import_output_type, import_tools
from ..config.output import OutputSpec
from ..errors import CliError, OutputError, SubscriptionLimitError, ToolkitError, UsageError
from ..testing import ScriptedModel, follow_prompt
from ..toolkit import Toolkit
from ..toolkit.mcp import load_mcp_config
from ..toolkit.skills import load_skills
from ..transports.oneshot import CliStyles, load_cli_style
from ._shared import check_timeout
from .errors import (
    usage_budget,
    usage_command_without_style,
    usage_custom_style,
    usage_files,
    usage_max_turns,
    usage_not_installed,
    usage_output_type,
    usage_script_not_a_list,
    usage_script_unreadable,
    usage_script_with_style,
    usage_tools,
)
from .invocation import Invocation


def tools_of(specs: Sequence[str]) -> list[Any]:
    try:
        return import_tools(specs)
    except ToolkitError as exc:
        raise usage_tools(exc) from exc


def check_files(mcp: str | None, skills: str | None) -> None:
    """An ``mcp.json`` that cannot be read or is not valid, a skills folder that is not one:
    usage errors, found before anything starts (a server that fails to start is not)."""
    try:
        if mcp is not None:
            load_mcp_config(mcp)
        if skills is not None:
            load_skills(skills)
    except ToolkitError as exc:
        raise usage_files(exc) from exc


def _output_type(spec: str | None) -> Any:
    """The type ``--output-type`` names, refused in one line when pydantic cannot use it."""
    try:
        target = import_output_type(spec)
        OutputSpec.of(target)
    except OutputError as exc:
        raise usage_output_type(exc) from exc
    return target


def _script(path: Path) -> ScriptedModel:
    try:
        replies = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise usage_script_unreadable(path, exc) from exc
    if not isinstance(replies, list):
        raise usage_script_not_a_list()
    return ScriptedModel(replies)


def _installed(command: str | None, flag: str) -> None:
    """A missing binary is refused before any server or flow starts (the run would only
    find out at its first turn)."""
    if command is not None and shutil.which(command) is None:
        raise usage_not_installed(flag, command)


def client_of(invocation: Invocation) -> Client:
    """The client an invocation describes; every mistake in it is a usage error, found
    before Prefect starts."""
    if invocation.max_turns is not None and invocation.max_turns < 1:
        raise usage_max_turns(invocation.max_turns)
    for flag, bound in (("--max-cost-usd", invocation.max_cost_usd), ("--max-tokens", invocation.max_tokens)):
        if bound is not None and bound <= 0:
            raise usage_budget(flag, bound)
    if invocation.timeout is not None:
        check_timeout(invocation.timeout)
    options: dict[str, Any] = {
        "system_prompt": invocation.system_prompt,
        "limit": invocation.limit,
        "max_concurrent": invocation.max_concurrent,
        "per_minute": invocation.per_minute,
        "output_type": _output_type(invocation.output_type),
        "max_cost_usd": invocation.max_cost_usd,
        "max_tokens": invocation.max_tokens,
    }
    if invocation.max_turns is not None:
        options["max_turns"] = invocation.max_turns
    style = invocation.style
    if style is None and invocation.style_file is None:
        if invocation.command or invocation.model:
            raise usage_command_without_style()
        script = invocation.script
        try:
            return create_in_process_client(_script(Path(script)) if script else follow_prompt, **options)
        except SubscriptionLimitError as exc:
            raise UsageError(str(exc)) from exc
    if invocation.script is not None:
        raise usage_script_with_style()
    if style is CliStyles.CUSTOM:
        raise usage_custom_style()
    cli_options: dict[str, Any] = {
        "timeout": invocation.timeout,
        "transport": invocation.transport,
        "acp_command": invocation.acp_command,
    }
    try:
        chosen = style if style is not None else load_cli_style(Path(str(invocation.style_file)))
        client = create_cli_client(chosen, invocation.command, invocation.model, **cli_options, **options)
    except (CliError, SubscriptionLimitError) as exc:
        raise UsageError(str(exc)) from exc
    _installed(invocation.command, "--command")
    _installed(invocation.acp_command, "--acp-command")
    return client


async def toolkit_of(kit: list[Any], invocation: Invocation) -> Toolkit:
    """The toolkit an invocation names: its tools, MCP servers and skills."""
    return await Toolkit.load(tools=kit, mcp_config=invocation.mcp_config, skills_dir=invocation.skills_dir)
