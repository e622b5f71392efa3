"""An ACP session replayed from a cassette against the same session run live and recorded.

    python benchmarks/acp_cassette.py [--turns 20] [--tool-calls 20]

(a) N turns over one warm ACP session of the scripted agent (tests/support/helpers/acp_agent.py),
no cassette: the baseline; (b) the same session recorded to a cassette; (c) the same N turns
replayed from it, no process; per-turn time of each and the ratios to the baseline (a turn
has a floor: the transport waits 20 ms of quiet for late updates). Then the last turn, which
makes ``--tool-calls`` served tool calls, in each: a replayed call is made again through the
served MCP server (its own MCP client each call), so replay does not hide what the tools
cost. Without Prefect: the transport's figures.
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
from nexusflow.testing import Cassette
from nexusflow.transports.acp.transport import AcpConfig, AcpTransport

AGENT = Path(__file__).parent.parent / "tests" / "support" / "helpers" / "acp_agent.py"


@tool
def noop(n: int) -> int:
    """Returns its argument."""
    return n


def request(turn: int) -> ModelRequest:
    return ModelRequest.model_validate({"messages": [{"role": "user", "content": f"turn {turn}"}], "tools": []})


async def remember(kind, inputs, produce):
    return await produce(), False


async def session(root: Path, cassette: Cassette | None, turns: int, tool_calls: int) -> tuple[list[float], float]:
    """Per-turn seconds of turns 1..N-1 (turn 0 warms up), and the seconds of the tool turn."""
    style = CliStyle(
        name="bench", args=[], prompt_mode="stdin", verified="bench", acp=AcpLaunch(args=[str(AGENT)], verified="bench")
    )
    config = AcpConfig(
        style=style, command=sys.executable, env={"ACP_AGENT_DIR": str(root)}, workspace=str(root), cwd=str(root)
    )
    transport = AcpTransport(config, cassette)
    await transport.start()
    async with await Toolkit.load(tools=[noop]) as toolkit:
        scoped = ScopedSession(transport, toolkit)
        try:
            await transport.begin(remember, toolkit.specs())
            times = []
            for turn in range(turns):
                started = time.perf_counter()
                reply = await scoped.generate(request(turn))
                times.append(time.perf_counter() - started)
                assert reply.content == "ok", reply
            started = time.perf_counter()
            reply = await scoped.generate(request(turns))
            tools = time.perf_counter() - started
            assert reply.content == "done" and reply.stats.tool_calls == tool_calls, reply
        finally:
            await transport.close()
    return times[1:], tools


async def main(turns: int, tool_calls: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        prompts = [[{"say": "ok"}] for _ in range(turns)]
        prompts.append([{"tool": "noop", "arguments": {"n": i}} for i in range(tool_calls)] + [{"say": "done"}])
        (root / "script.json").write_text(json.dumps({"prompts": prompts}))
        path = root / "bench.json"
        plain, plain_tools = await session(root, None, turns, tool_calls)
        (root / "prompt_count").unlink()  # the scripted agent plays its script from the start again
        live, live_tools = await session(root, Cassette(path, "record"), turns, tool_calls)
        replayed, replayed_tools = await session(root, Cassette(path, "replay"), turns, tool_calls)
        size = path.stat().st_size
    plain_ms = statistics.median(plain) * 1000
    live_ms, replay_ms = statistics.median(live) * 1000, statistics.median(replayed) * 1000
    print(f"{turns} turns each (median of {turns - 1}); {tool_calls} served tool calls in the last; cassette {size} B")
    print(f"live ACP session, per turn            : {plain_ms:8.2f} ms")
    print(f"live ACP session, recording, per turn : {live_ms:8.2f} ms  ({live_ms / plain_ms:.2f}x live)")
    print(f"replayed from the cassette, per turn  : {replay_ms:8.2f} ms  ({replay_ms / plain_ms:.2f}x live)")
    for name, seconds in (("live", plain_tools), ("recording", live_tools), ("replayed", replayed_tools)):
        per_call = seconds * 1000 / tool_calls
        print(f"tool turn, {name + ',':10} per call          : {per_call:8.2f} ms  ({seconds / plain_tools:.2f}x live)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--tool-calls", type=int, default=20)
    options = parser.parse_args()
    anyio.run(main, options.turns, options.tool_calls)
