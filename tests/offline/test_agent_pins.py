"""The versions the live tier installs (.ci/agents.json), the versions each style says it is
verified against (nexusflow/styles/*.json) and the versions the docs tell users to install
(docs/transports.md) are one set: moving a pin without the others fails here, in the fast
tier. The live tier checks the installed packages against the same table
(tests/live/test_live.py)."""

import json
import re

from nexusflow import CliStyles
from nexusflow.transports.oneshot.style import builtin_style

from live_agents import ADAPTERS, MANIFEST, PINS_PAGE, documented

PACKAGES = {
    CliStyles.CLAUDE: "@anthropic-ai/claude-code",
    CliStyles.CODEX: "@openai/codex",
    CliStyles.GEMINI: "@google/gemini-cli",
    CliStyles.COPILOT: "@github/copilot",
    CliStyles.OPENCODE: "opencode-ai",
    CliStyles.GOOSE: "@aaif/goose-binary-linux-x64",
}
"""Each verified style's npm package."""

ADAPTER_PACKAGES = {
    "claude-agent-acp": "@agentclientprotocol/claude-agent-acp",
    "codex-acp": "@agentclientprotocol/codex-acp",
}


def pins() -> dict[str, str]:
    return dict(json.loads(MANIFEST.read_text())["packages"])


def test_the_pins_the_styles_and_the_docs_name_the_same_versions():
    assert {package: version for package, (version, _) in documented().items()} == pins(), "docs/transports.md"
    assert set(PACKAGES.values()) | set(ADAPTER_PACKAGES.values()) == set(pins())
    text = PINS_PAGE.read_text()
    for style, package in PACKAGES.items():
        chosen = builtin_style(style)
        assert chosen.verified == pins()[package], f"{style.value}: style verified {chosen.verified}"
        row = re.search(rf"^\| `{style.name}` \|.*\| ([^|]+) \|$", text, re.MULTILINE)
        assert row is not None and row.group(1) == chosen.verified, f"{style.value}: the styles' table"
        adapter = ADAPTERS.get(style)
        assert chosen.acp is not None
        expected = f"{adapter} {pins()[ADAPTER_PACKAGES[adapter]]}" if adapter else pins()[package]
        assert chosen.acp.verified == expected, f"{style.value}: acp verified {chosen.acp.verified}"
    for adapter, package in ADAPTER_PACKAGES.items():
        row = re.search(rf"^\| [^|]+ \| adapter `{adapter}` \| ([^|]+) \|", text, re.MULTILINE)
        assert row is not None and row.group(1) == pins()[package], f"{adapter}: the ACP agents' table"
