"""The code blocks of the documentation (README.md, then the site's pages under docs/ in
the order of mkdocs.yml's nav), as a reader copies them. A block is named by the marker on
the line before its fence: ``<!-- name -->``, or ``<!-- fragment: why -->`` for one that
cannot run on its own. Imports nothing from Prefect."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).parents[3]
DOCS = REPO / "docs"

RUN_AS_COPIED: dict[str, str] = {
    "first-run": "completed 2 + 3 = 5\n",
    "getting-started": "completed 2 + 3 = 5\n",
    "cli-client": "",
    "getting-started-cli": "",
    "acp-clients": "",
    "ask-a-person": "",
    "tool-policies": "",
    "model-retries": "completed 1 2\n",
    "budgets": "failed budget: session budget-demo spent $0.03 of $0.03 (max_cost_usd)\n",
    "quota": "completed answered by the backup\n",
    "typed-output": "2 1\n",
    "compose-as-tool": 'revised after {"approved":true,"advice":"Shorter."}\n',
    "compose-map": (
        "facts-1.0 completed topic='Prefect' letters=7\n"
        "facts-1.1 failed model: generate raised RuntimeError: no such topic\n"
        "facts-1.2 completed topic='MCP' letters=3\n"
    ),
    "compose-prefect-map": "['Summarize Prefect.', 'Summarize MCP.', 'Summarize ACP.']\n",
    "sessions": "pruned 0 sessions\n",
    "traces": "['chat my-model', 'invoke_agent nexusflow']\n",
}
"""The blocks tests/homes/test_docs.py runs as a reader runs them, one after another on one
home, and what each prints; every other block is run elsewhere or says why not
(tests/offline/test_doc_blocks.py)."""

FIRST_RUN = "first-run"
"""The block a newcomer runs first, on a fresh home: the README's."""


@dataclass(frozen=True)
class Block:
    marker: str
    language: str
    code: str
    path: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def pages() -> list[Path]:
    """README.md, then the site's pages in the nav's order, then any page the nav leaves out."""
    nav = re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), re.MULTILINE)
    ordered = [DOCS / name for name in nav]
    rest = sorted(path for path in DOCS.rglob("*.md") if path not in ordered)
    return [REPO / "README.md", *ordered, *rest]


def blocks_of(path: Path) -> list[Block]:
    found = []
    lines = path.read_text().splitlines()
    name = str(path.relative_to(REPO))
    index = 0
    while index < len(lines):
        fence = re.match(r"^```(\w*)$", lines[index])
        if fence and fence.group(1):
            marked = re.match(r"^<!-- (.*) -->$", lines[index - 1]) if index else None
            end = lines.index("```", index + 1)
            code = "\n".join(lines[index + 1 : end]) + "\n"
            found.append(Block(marked.group(1) if marked else "", fence.group(1), code, name, index + 1))
            index = end
        index += 1
    return found


def blocks() -> list[Block]:
    return [block for path in pages() for block in blocks_of(path)]


def block(marker: str) -> str:
    """The code of the one block marked exactly ``marker``, wherever it lives."""
    return _one([block for block in blocks() if block.marker == marker], f"marked {marker}")


def block_marked(words: str) -> str:
    """The code of the one block whose marker says ``words`` (a fragment's why)."""
    return _one([block for block in blocks() if words in block.marker], f"whose marker says {words!r}")


def _one(found: list[Block], what: str) -> str:
    assert len(found) == 1, f"the docs have {len(found)} blocks {what}: {[block.where for block in found]}"
    return found[0].code
