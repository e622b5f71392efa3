"""A warm ACP session against one-shot launches of the same scripted agent, in one process.

    python benchmarks/acp_vs_cli.py [--turns 20] [--tool-calls 50]

(a) N turns over one warm ACP session (one agent process, one session/prompt per turn);
(b) N one-shot launches of the same agent script (``--one-shot``); per-turn time of both
and the ratio. Then (c) the latency of served MCP tool calls (agent -> our MCP server over
HTTP on 127.0.0.1 with the bearer token -> the tool -> back), as the agent measures it:
p50 and p95. The transports run without Prefect here, so the figures are the transports'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from real_agents import ScopedSession

from nexusflow import AcpLaunch, CliStyle, ModelRequest, Toolkit, tool
from nexusflow.transports.acp.transport import AcpConfig, AcpTransport
from nexusflow.transports.oneshot import CliConfig, CliTransport

AGENT = Path(__file__).parent.parent / "tests" / "support" / "helpers" / "acp_agent.py"


@tool
def noop(n: int) -> int:
    """Returns its argument."""
    return n


def request() -> ModelRequest:
    return ModelRequest.model_validate({"messages": [{"role": "user", "content": "benchmark turn"}], "tools": []})


async def remember(kind, inputs, produce):
    return await produce(), False


async def warm_acp(root: Path, turns: int, tool_calls: int, toolkit: Toolkit) -> tuple[list[float], list[float]]:
    prompts = [[{"say": "ok"}] for _ in range(turns)]
    prompts.append([{"tool": "noop", "arguments": {"n": i}} for i in range(tool_calls)] + [{"say": "done"}])
    (root / "script.json").write_text(json.dumps({"prompts": prompts}))
    style = CliStyle(
        name="bench", args=[], prompt_mode="stdin", verified="bench", acp=AcpLaunch(args=[str(AGENT)], verified="bench")
    )
    cwd = str(Path.cwd())
    config = AcpConfig(style=style, command=sys.executable, env={"ACP_AGENT_DIR": str(root)}, workspace=cwd, cwd=cwd)
    transport = AcpTransport(config)
    await transport.start()

    session = ScopedSession(transport, toolkit)
    try:
        await transport.begin(remember, toolkit.specs())
        await session.generate(request())  # warm-up turn, not counted
        times = []
        for _ in range(turns - 1):
            started = time.perf_counter()
            reply = await session.generate(request())
            times.append(time.perf_counter() - started)
            assert reply.content == "ok"
        reply = await session.generate(request())
        assert reply.content == "done" and reply.stats.tool_calls == tool_calls
    finally:
        await transport.close()
    log = [json.loads(line) for line in (root / "log.jsonl").read_text().splitlines()]
    latencies = [entry["seconds"] for entry in log if entry["kind"] == "tool_result"]
    return times, latencies


async def one_shot(turns: int) -> list[float]:
    style = CliStyle(name="bench", args=[str(AGENT), "--one-shot"], prompt_mode="stdin", verified="bench")
    transport = CliTransport(CliConfig(style=style, command=sys.executable))
    times = []
    for _ in range(turns):
        started = time.perf_counter()
        reply = await transport.generate(request())
        times.append(time.perf_counter() - started)
        assert reply.content == "ok"
    return times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def main(turns: int, tool_calls: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        async with await Toolkit.load(tools=[noop]) as toolkit:
            acp, latencies = await warm_acp(Path(scratch), turns, tool_calls, toolkit)
    cli = await one_shot(turns)
    acp_ms = statistics.median(acp) * 1000
    cli_ms = statistics.median(cli) * 1000
    print(f"{turns} turns each (median); {tool_calls} served tool calls")
    print(f"warm ACP session, per turn : {acp_ms:8.2f} ms")
    print(f"one-shot launch, per turn  : {cli_ms:8.2f} ms")
    print(f"ratio one-shot / ACP       : {cli_ms / acp_ms:8.1f}x")
    print(f"served MCP tool call p50   : {percentile(latencies, 0.5) * 1000:8.2f} ms")
    print(f"served MCP tool call p95   : {percentile(latencies, 0.95) * 1000:8.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--tool-calls", type=int, default=50)
    options = parser.parse_args()
    anyio.run(main, options.turns, options.tool_calls)
