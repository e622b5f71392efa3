"""Where the pinned real agent CLIs are (installed by .ci/install-agents), and the skip rule:
locally a missing binary skips its test with the reason; in CI (CI=true) it fails. And the
versions docs/transports.md names, which the fast tier holds to the pins and the live tier to
what is installed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from nexusflow import CliStyles

from helpers.docs import DOCS

MANIFEST = Path(__file__).parent.parent.parent / ".ci" / "agents.json"
PINS_PAGE = DOCS / "transports.md"
"""The page whose tables name the verified versions."""


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
ACP_STYLES = list(ADAPTERS)
"""The styles whose ACP agent's session is committed (``tests/cassettes/acp-<style>.json``)."""
ACP_STYLE_IDS = [ADAPTERS[style] for style in ACP_STYLES]


def table(marker: str, page: Path = PINS_PAGE) -> list[list[str]]:
    """The body rows of the table that follows ``marker`` (``<!-- name -->``), cell by cell."""
    lines = page.read_text().splitlines()
    start = lines.index(f"<!-- {marker} -->") + 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    assert len(rows) > 2, f"no table after <!-- {marker} --> in {page.name}"
    return rows[2:]


def documented() -> dict[str, tuple[str, str]]:
    """The verified-versions table: npm package -> (version, the Node its package declares)."""
    return {row[1].strip("`"): (row[2], row[3].strip("`")) for row in table("verified-versions")}
