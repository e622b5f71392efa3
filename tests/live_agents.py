"""Where the pinned real agent CLIs are (installed by .ci/install-agents), and the skip rule:
locally a missing binary skips its test with the reason; in CI (CI=true) it fails."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from nexusflow import CliStyles

MANIFEST = Path(__file__).parent.parent / ".ci" / "agents.json"


def agents_dir() -> Path:
    key = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "nexusflow" / "agents" / key


def binary(name: str) -> str:
    """The path of a pinned binary, or skip (fail in CI) when it is not installed."""
    path = agents_dir() / json.loads(MANIFEST.read_text())["binaries"][name]
    if not path.exists():
        reason = f"{name} is not installed at {path}: run .ci/install-agents"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return str(path)


def pinned(package: str) -> str:
    return json.loads(MANIFEST.read_text())["packages"][package]


ONE_SHOT = {
    CliStyles.CLAUDE: "claude",
    CliStyles.CODEX: "codex",
    CliStyles.GEMINI: "gemini",
    CliStyles.COPILOT: "copilot",
    CliStyles.OPENCODE: "opencode",
    CliStyles.GOOSE: "goose",
}
"""The real one-shot CLIs by style: the binary's name in the manifest."""

ADAPTERS = {CliStyles.CLAUDE: "claude-agent-acp", CliStyles.CODEX: "codex-acp"}
"""The ACP adapters of the styles that need one: the binary's name in the manifest."""
