"""The fake CLI, set up per test: write its script, read what it recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAKE_CLI = Path(__file__).parent / "helpers" / "fake_cli.py"


@dataclass
class FakeCli:
    root: Path

    @property
    def command(self) -> str:
        return str(FAKE_CLI)

    def script(self, *replies: dict[str, Any]) -> None:
        (self.root / "script.json").write_text(json.dumps(list(replies), ensure_ascii=False), encoding="utf-8")

    def calls(self) -> list[dict[str, Any]]:
        path = self.root / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def children(self) -> list[int]:
        path = self.root / "children"
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def styled(style: str, text: str) -> dict[str, Any]:
    """A reply carrying ``text`` the way the style's CLI prints its answer."""
    if style == "claude":
        return {"stdout": json.dumps({"type": "result", "is_error": False, "result": text})}
    if style == "gemini":
        return {"stdout": json.dumps({"response": text, "stats": {}})}
    if style == "codex":
        return {"out": text, "stdout": "codex transcript line\n"}
    return {"stdout": text + "\n"}


def envelope_answer(text: str) -> str:
    return json.dumps({"content": text}, ensure_ascii=False)


def envelope_calls(*calls: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": list(calls)}, ensure_ascii=False)


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
