"""Which permission requests name one of our served tools, in the shapes real agents send."""

import pytest

from nexusflow.transports.acp.permissions import choose, identify

SERVER = "nexusflow_ab12cd"
TOOLS = ("add", "search")


@pytest.mark.parametrize(
    "tool_call",
    [
        {
            "toolCallId": "t1",
            "_meta": {"claudeCode": {"mcpServer": {"name": SERVER}, "toolName": f"mcp__{SERVER}__add"}},
        },
        {"toolCallId": "t2", "title": f"mcp__{SERVER}__add"},
        {"toolCallId": "t3", "title": f"mcp.{SERVER}.add"},
        {"toolCallId": "t4", "title": f"add ({SERVER} MCP Server)"},
        {"toolCallId": f"mcp_{SERVER}_add__9", "title": "add"},
        {"toolCallId": "t6", "title": f"{SERVER}-add"},
        {"toolCallId": "t7", "title": f"{SERVER}_add"},
        {"toolCallId": "t8", "_meta": {"goose": {"toolCall": {"toolName": f"{SERVER}__add", "extensionName": SERVER}}}},
    ],
    ids=["claude-meta", "claude-title", "codex", "gemini-title", "gemini-id", "copilot", "opencode", "goose"],
)
def test_our_tools_are_recognised_in_every_agents_shape(tool_call):
    assert identify(tool_call, SERVER, TOOLS) == "add"


@pytest.mark.parametrize(
    "tool_call",
    [
        {"toolCallId": "x1", "title": "Run shell: echo mcp__nexusflow_ab12cd__add", "kind": "execute"},
        {"toolCallId": "x2", "title": "mcp__nexusflow_zz99zz__add"},
        {"toolCallId": "x3", "title": f"mcp__{SERVER}__delete_everything"},
        {"toolCallId": "x4", "_meta": {"claudeCode": {"mcpServer": {"name": "other"}, "toolName": "add"}}},
        {"toolCallId": "x5", "title": "add"},
        {"toolCallId": "x6"},
    ],
    ids=["free-text-title", "other-server", "not-our-tool", "other-server-meta", "bare-name", "nothing"],
)
def test_nothing_else_passes(tool_call):
    assert identify(tool_call, SERVER, TOOLS) is None


def test_choose_picks_once_options_and_cancels_without_any():
    options = [
        {"optionId": "a", "kind": "allow_always"},
        {"optionId": "b", "kind": "allow_once"},
        {"optionId": "c", "kind": "reject_once"},
    ]
    assert choose(options, allow=True) == {"outcome": {"outcome": "selected", "optionId": "b"}}
    assert choose(options, allow=False) == {"outcome": {"outcome": "selected", "optionId": "c"}}
    assert choose([{"optionId": "a", "kind": "allow_once"}], allow=False) == {"outcome": {"outcome": "cancelled"}}
    assert choose("garbage", allow=True) == {"outcome": {"outcome": "cancelled"}}
