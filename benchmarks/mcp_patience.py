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
import tempfile
import time
from pathlib import Path

import anyio
from real_agents import AGENTS, installed, remember, request

from nexusflow import CliStyles, Toolkit, Transport, create_cli_client, tool
from nexusflow._runtime import ActiveRun, active_run
from nexusflow.tasks import execute_tool
from nexusflow.testing import Reply, ScriptedModelServer
from nexusflow.testing.conformance import default_model
from nexusflow.transports.acp.transport import AcpTransport


async def patience(style: CliStyles, command: str, adapter: str | None, hold: float, cap: float) -> str:
    started: list[float] = []

    @tool
    async def wait_here() -> str:
        """Wait for the outside world."""
        started.append(time.perf_counter())
        await anyio.sleep(hold)
        return "answered"

    replies = [Reply.call("wait_here"), Reply.say("gave up"), Reply.say("gave up")]
    async with ScriptedModelServer(replies) as server:
        with tempfile.TemporaryDirectory(prefix="nexusflow-patience-") as scratch:
            home = Path(scratch)
            client = create_cli_client(
                style,
                command,
                default_model(style, acp=True),
                transport=Transport.ACP,
                acp_command=adapter,
                env=server.environment(style, home, acp=True),
                workspace=home,
                cwd=home,
                timeout=cap + 60,
            )

            async def run_tool(step, index, call):  # type: ignore[no-untyped-def]
                return await execute_tool(call), False

            async with await Toolkit.load(tools=[wait_here]) as toolkit, client.transport() as transport:
                assert isinstance(transport, AcpTransport)
                token = active_run.set(ActiveRun(client.options, toolkit, transport, "patience", run_tool=run_tool))
                try:
                    await transport.begin(remember)
                    async with anyio.create_task_group() as group:
                        group.start_soon(transport.generate, request())
                        while len(server.turns()) < 2:
                            if started and time.perf_counter() - started[0] > cap:
                                group.cancel_scope.cancel()
                                return f">= {cap:.0f} s"
                            await anyio.sleep(0.05)
                        waited = time.perf_counter() - started[0] if started else float("nan")
                        print(f"  {style.value}: the agent moved on after {waited:.1f} s; closing", file=sys.stderr)
                        group.cancel_scope.cancel()
                finally:
                    active_run.reset(token)
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
