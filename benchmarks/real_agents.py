"""Per real agent CLI: one-shot start-up and warm ACP per-turn time, on the scripted server.

    python benchmarks/real_agents.py [--launches 3] [--turns 5] [--only claude,gemini]

The pinned CLIs installed by ``.ci/install-agents`` (an agent that is not installed is
listed as such). Baseline, measured in the same run: one model request sent straight to the
scripted server (what a turn costs without any agent). Per agent: (a) one one-shot turn,
i.e. a whole launch of the CLI answering through the envelope (median of ``--launches``);
(b) ACP start: spawn, ``initialize`` and ``session/new`` (or the adapter's equivalent);
(c) one warm ACP turn (median of ``--turns`` after a first turn that is not counted).
Ratios: each against the baseline, and one-shot against the warm ACP turn. The transports
run without Prefect, so the figures are the agents' and ours, not the server's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx

from nexusflow import CliStyles, ModelReply, ModelRequest, ToolCall, Toolkit, Transport, create_cli_client
from nexusflow.tasks import ToolRuntime, execute_tool
from nexusflow.testing import ScriptedModelServer, ScriptedReply
from nexusflow.testing.conformance import SERVER_MODEL, default_model, scripted_cli, version_of
from nexusflow.transports import CallOutcome, TurnScope
from nexusflow.transports.acp.transport import AcpTransport

ROOT = Path(__file__).parent.parent
MANIFEST = ROOT / ".ci" / "agents.json"
AGENTS = {
    CliStyles.CLAUDE: ("claude", "claude-agent-acp"),
    CliStyles.CODEX: ("codex", "codex-acp"),
    CliStyles.GEMINI: ("gemini", None),
    CliStyles.COPILOT: ("copilot", None),
    CliStyles.OPENCODE: ("opencode", None),
    CliStyles.GOOSE: ("goose", None),
}


def installed(name: str) -> str | None:
    key = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = cache / "nexusflow" / "agents" / key / json.loads(MANIFEST.read_text())["binaries"][name]
    return str(path) if path.exists() else None


def request() -> ModelRequest:
    return ModelRequest.model_validate({"messages": [{"role": "user", "content": "Say ok."}], "tools": []})


async def timed(produce: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await produce()
    return time.perf_counter() - started


async def baseline(requests: int) -> float:
    """One Anthropic Messages request straight to the scripted server, median."""
    async with ScriptedModelServer(["ok"] * requests) as server, httpx.AsyncClient() as http:
        body = {"model": SERVER_MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "Say ok."}]}
        times = [
            await timed(lambda: http.post(f"{server.url}/v1/messages", json=body, headers={"x-api-key": "k"}))
            for _ in range(requests)
        ]
    return statistics.median(times)


async def one_shot(style: CliStyles, command: str, launches: int) -> float:
    answer = json.dumps({"content": "ok"})
    async with scripted_cli(style, [answer] * launches * 4) as (_server, home, env):
        client = create_cli_client(
            style, command, default_model(style), transport=Transport.CLI, env=env, cwd=home, repair_budget=0
        )
        times = []
        async with client.transport() as transport:
            for _ in range(launches):
                started = time.perf_counter()
                reply = await transport.generate(request())
                times.append(time.perf_counter() - started)
                if reply.content != "ok":
                    raise RuntimeError(f"{style.value}: one-shot answered {reply.content!r}")
    return statistics.median(times)


async def remember(kind: str, inputs: Any, produce: Callable[[], Awaitable[Any]]) -> tuple[Any, bool]:
    return await produce(), False


class ScopedSession:
    """An ACP transport whose turns run served calls straight through the toolkit."""

    def __init__(self, transport: AcpTransport, toolkit: Toolkit) -> None:
        tools = ToolRuntime(toolkit=toolkit)

        async def call_tool(index: int, call: ToolCall) -> CallOutcome:
            return CallOutcome(result=(await execute_tool(call, tools)).result, replayed=False)

        self.transport = transport
        self.scope = TurnScope(step=0, call_tool=call_tool)

    async def generate(self, request: ModelRequest) -> ModelReply:
        return await self.transport.generate(request, self.scope)


@asynccontextmanager
async def acp_session(
    style: CliStyles,
    command: str,
    adapter: str | None,
    home: Path,
    env: dict[str, str],
    toolkit: Toolkit,
    timeout: float = 300.0,
) -> AsyncIterator[ScopedSession]:
    """An open, begun ACP session of a real agent, as a run would have it, without Prefect:
    served calls run the toolkit directly."""
    client = create_cli_client(
        style,
        command,
        default_model(style, acp=True),
        transport=Transport.ACP,
        acp_command=adapter,
        env=env,
        workspace=home,
        cwd=home,
        timeout=timeout,
    )
    async with client.transport() as transport:
        assert isinstance(transport, AcpTransport)
        await transport.begin(remember, toolkit.specs())
        yield ScopedSession(transport, toolkit)


async def warm_acp(style: CliStyles, command: str, adapter: str | None, turns: int) -> tuple[float, float]:
    async with scripted_cli(style, [ScriptedReply.say("ok")] * (turns + 1), acp=True) as (_server, home, env):
        async with await Toolkit.load() as toolkit:
            started = time.perf_counter()
            async with acp_session(style, command, adapter, home, env, toolkit) as transport:
                start = time.perf_counter() - started
                await transport.generate(request())
                times = []
                for _ in range(turns):
                    started = time.perf_counter()
                    reply = await transport.generate(request())
                    times.append(time.perf_counter() - started)
                    if not (reply.content or "").endswith("ok"):  # codex-acp may prefix a warning
                        raise RuntimeError(f"{style.value}: ACP answered {reply.content!r}")
    return start, statistics.median(times)


async def main(launches: int, turns: int, only: set[str]) -> None:
    base = await baseline(20)
    print(f"baseline: one request straight to the scripted server: {base * 1000:.1f} ms (median of 20)")
    print(f"{'agent':9} {'version':28} {'one-shot turn':>14} {'ACP start':>10} {'ACP turn':>9} {'1-shot/ACP':>10}")
    for style, (name, adapter_name) in AGENTS.items():
        if only and style.value not in only:
            continue
        command = installed(name)
        adapter = installed(adapter_name) if adapter_name else None
        if command is None or (adapter_name and adapter is None):
            print(f"{style.value:9} not installed: run .ci/install-agents")
            continue
        version = version_of(command)[:28]
        cli = await one_shot(style, command, launches)
        start, acp = await warm_acp(style, command, adapter, turns)
        print(
            f"{style.value:9} {version:28} {cli * 1000:11.0f} ms {start * 1000:7.0f} ms {acp * 1000:6.0f} ms"
            f" {cli / acp:9.1f}x   (vs baseline: one-shot {cli / base:.0f}x, ACP turn {acp / base:.0f}x)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated style names")
    options = parser.parse_args()
    anyio.run(main, options.launches, options.turns, {s for s in options.only.split(",") if s})
