"""The scripted ACP agent, set up per test."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nexusflow import AcpLaunch, CliStyle

ACP_AGENT = Path(__file__).parent / "helpers" / "acp_agent.py"
HTTP = {"mcpCapabilities": {"http": True}}


@dataclass
class ScriptedAgent:
    root: Path

    def script(
        self, prompts: list[list[dict[str, Any]]], capabilities: dict[str, Any] | None = None, **extra: Any
    ) -> None:
        initialize = extra.pop(
            "initialize", {"protocolVersion": 1, "agentCapabilities": HTTP if capabilities is None else capabilities}
        )
        (self.root / "script.json").write_text(json.dumps({"initialize": initialize, "prompts": prompts, **extra}))

    def log(self, kind: str | None = None) -> list[dict[str, Any]]:
        path = self.root / "log.jsonl"
        entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [entry for entry in entries if kind is None or entry["kind"] == kind]

    def received(self, method: str) -> list[dict[str, Any]]:
        return [entry for entry in self.log("received") if entry["method"] == method]

    @property
    def style(self) -> CliStyle:
        return CliStyle(
            name="scripted",
            args=["-c", "print('one-shot')", ["--model", "{{model}}"]],
            prompt_mode="stdin",
            verified="test",
            acp=AcpLaunch(args=[str(ACP_AGENT)], env={"SCRIPTED_STYLE_ENV": "from-style"}, verified="test"),
        )

    @property
    def command(self) -> str:
        return sys.executable

    @property
    def env(self) -> dict[str, str]:
        return {"ACP_AGENT_DIR": str(self.root)}
