"""How long each real ACP agent waits on one of our served MCP tool calls before giving up.

    python benchmarks/mcp_patience.py [--cap 300] [--only gemini,goose]

The scripted model calls a served tool that answers only after ``--cap`` seconds; the time
from the call reaching us to the agent's next model request (its model being told the call
failed) is how long a suspended call can hold the agent (``wait_for`` over ACP). An agent
still waiting at the cap is reported as ``>= cap``. The agents run side by side, without
Prefect. Baseline, in the same run: the same served tool answering at once (a call that the
agent does not give up on), to show what the figure excludes.
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio
from real_agents import AGENTS, acp_session, installed, request

from nexusflow import CliStyles, Toolkit, tool
from nexusflow.testing import ScriptedReply
from nexusflow.testing.conformance import scripted_cli


async def patience(style: CliStyles, command: str, adapter: str | None, hold: float, cap: float) -> str:
    started: list[float] = []

    @tool
    async def wait_here() -> str:
        """Wait for the outside world."""
        started.append(time.perf_counter())
        await anyio.sleep(hold)
        return "answered"

    replies = [ScriptedReply.call("wait_here"), ScriptedReply.say("gave up"), ScriptedReply.say("gave up")]
    async with scripted_cli(style, replies, acp=True) as (server, home, env):
        async with (
            await Toolkit.load(tools=[wait_here]) as toolkit,
            acp_session(style, command, adapter, home, env, toolkit, timeout=cap + 60) as transport,
            anyio.create_task_group() as group,
        ):
            group.start_soon(transport.generate, request())
            while len(server.turns()) < 2:
                if started and time.perf_counter() - started[0] > cap:
                    group.cancel_scope.cancel()
                    return f">= {cap:.0f} s"
                await anyio.sleep(0.05)
            waited = time.perf_counter() - started[0] if started else float("nan")
            print(f"  {style.value}: the agent moved on after {waited:.1f} s; closing", file=sys.stderr)
            group.cancel_scope.cancel()
    return f"{waited:.1f} s"


async def main(cap: float, only: set[str]) -> None:
    chosen = {
        style: names for style, names in AGENTS.items() if (not only or style.value in only) and installed(names[0])
    }
    found: dict[CliStyles, tuple[str, str]] = {}

    async def measure(style: CliStyles, command: str, adapter: str | None) -> None:
        found[style] = (
            await patience(style, command, adapter, hold=0.0, cap=cap),
            await patience(style, command, adapter, hold=cap + 30, cap=cap),
        )
        print(f"{style.value:9} {found[style][0]:>24} {found[style][1]:>25}", flush=True)

    print(f"{'agent':9} {'tool answering at once':>24} {'tool that never answers':>25}", flush=True)
    async with anyio.create_task_group() as group:
        for style, (name, adapter_name) in chosen.items():
            group.start_soon(measure, style, installed(name), installed(adapter_name) if adapter_name else None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=float, default=300)
    parser.add_argument("--only", default="", help="comma-separated style names")
    options = parser.parse_args()
    anyio.run(main, options.cap, {s for s in options.only.split(",") if s})
