"""Deciding ``session/request_permission``: allow a call of our own served tools, reject
everything else (the agent's shell, edits, fetches, other MCP servers).

Agents ask before they call our MCP server, so there is no call of ours to match yet. The
decision is keyed by ``toolCallId`` and made from the identity the agent announced for that
id, in the shapes real agents use. Every accepted shape names our per-session random
server name exactly, so a free-text title ("Run shell: ... nexusflow_ab12cd ...") or
another server's tool can never pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .connection import as_object
from .served import ServedToolkit

CANCELLED: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}


def _exact_names(server: str, tool: str) -> set[str]:
    return {
        f"mcp__{server}__{tool}",  # claude-agent-acp
        f"mcp.{server}.{tool}",  # codex-acp
        f"{tool} ({server} MCP Server)",  # gemini
        f"mcp_{server}_{tool}",  # gemini's function name
        f"{server}-{tool}",  # copilot
        f"{server}_{tool}",  # opencode
        f"{server}__{tool}",  # goose
    }


def identify(tool_call: dict[str, Any], server: str, tools: tuple[str, ...]) -> str | None:
    """The served tool a ``toolCall`` (from a permission request or a ``tool_call`` update)
    names, or None when it names none of ours."""
    claude = as_object(as_object(tool_call.get("_meta")).get("claudeCode"))
    mcp_server = as_object(claude.get("mcpServer"))
    if mcp_server.get("name") == server:
        name = claude.get("toolName")
        for tool in tools:
            if name in (tool, f"mcp__{server}__{tool}"):
                return tool
    goose = as_object(as_object(as_object(tool_call.get("_meta")).get("goose")).get("toolCall"))
    if goose.get("extensionName") == server:
        for tool in tools:
            if goose.get("toolName") == f"{server}__{tool}":
                return tool
    names = {value for value in (tool_call.get("title"), tool_call.get("name")) if isinstance(value, str)}
    call_id = tool_call.get("toolCallId")
    for tool in tools:
        exact = _exact_names(server, tool)
        if names & exact:
            return tool
        if isinstance(call_id, str) and call_id.startswith(f"mcp_{server}_{tool}__"):
            return tool
    return None


def choose(options: Any, allow: bool) -> dict[str, Any]:
    """The outcome for a decision: the agent's allow-once option (or allow-always), or its
    reject-once option (or reject-always); cancelled when it offers no such option."""
    kinds = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
    if not isinstance(options, list):
        return CANCELLED
    for kind in kinds:
        for option in options:
            if isinstance(option, dict) and option.get("kind") == kind and isinstance(option.get("optionId"), str):
                return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
    return CANCELLED


class Permissions:
    """Answers the agent's permission requests for the session: nothing while a turn is
    being cancelled or the transport closes."""

    def __init__(self, announced: dict[str, dict[str, Any]], log: Callable[[str], None]) -> None:
        self.announced = announced
        self.served: ServedToolkit | None = None
        self.cancelling = False
        self._log = log

    def decide(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.cancelling:
            return CANCELLED
        tool_call = as_object(params.get("toolCall"))
        call_id = tool_call.get("toolCallId")
        announced = self.announced.get(call_id, {}) if isinstance(call_id, str) else {}
        served = self.served
        tool = None
        if served is not None:
            tool = identify(tool_call, served.name, served.tools) or identify(announced, served.name, served.tools)
        outcome = choose(params.get("options"), allow=tool is not None)
        verdict = f"allowed ({tool})" if tool else "rejected"
        self._log(f"acp: permission for {tool_call.get('title') or call_id}: {verdict}")
        return outcome
