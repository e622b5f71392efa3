"""What a short real run costs the model provider: requests, bytes a request, wall time.

    python benchmarks/real_run.py [--repeat 3] [--only claude,codex] [--transports acp,one-shot]

Per pinned real agent (claude, codex; installed by ``.ci/install-agents``) and transport, a
3-turn run on the scripted model server: the model calls ``add`` twice in sequence, then
answers. Counted at the server: the model requests of the run's turns, the agent's side
requests (titles, suggestions, probes), the mean bytes of a turn's request body, the bytes
of all requests; and the wall time of the run (agent start and close included). Medians of
``--repeat``. The transports run without Prefect, so the figures are the agents' and ours,
not the engine's; notes: ``notes/real_run.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass

import anyio
from real_agents import AGENTS, acp_session, installed

from nexusflow import CliStyles, ModelRequest, Toolkit, Transport, create_cli_client, tool
from nexusflow.messages import AssistantMessage, ToolMessage, UserMessage
from nexusflow.testing import ScriptedModelServer, ScriptedReply
from nexusflow.testing.conformance import default_model, scripted_cli

PROMPT = "Add 2 and 3 with the add tool, then add 4 to the result."


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@dataclass
class Figures:
    wall: float
    turns: int
    side: int
    turn_bytes: float
    all_bytes: int


def count(server: ScriptedModelServer, wall: float) -> Figures:
    model = [r for r in server.requests if r.api is not None]
    sizes = [len(json.dumps(r.body)) for r in model]
    turns = [len(json.dumps(r.body)) for r in model if not r.side]
    return Figures(wall, len(turns), len(model) - len(turns), statistics.mean(turns) if turns else 0, sum(sizes))


async def acp_run(style: CliStyles, command: str, adapter: str | None) -> Figures:
    replies = [ScriptedReply.call("add", {"a": 2, "b": 3}), ScriptedReply.call("add", {"a": 5, "b": 4}), "It is 9."]
    async with scripted_cli(style, replies, acp=True) as (server, home, env):
        async with await Toolkit.load(tools=[add]) as toolkit:
            started = time.perf_counter()
            async with acp_session(style, command, adapter, home, env, toolkit) as session:
                reply = await session.generate(request())
            wall = time.perf_counter() - started
    if not (reply.content or "").endswith("It is 9."):
        raise RuntimeError(f"{style.value}: ACP answered {reply.content!r}")
    return count(server, wall)


async def one_shot_run(style: CliStyles, command: str) -> Figures:
    def calls(a: int, b: int) -> str:
        return json.dumps({"tool_calls": [{"id": f"c{a}", "name": "add", "arguments": {"a": a, "b": b}}]})

    replies = [calls(2, 3), calls(5, 4), json.dumps({"content": "It is 9."})]
    async with scripted_cli(style, replies) as (server, home, env):
        client = create_cli_client(style, command, default_model(style), transport=Transport.CLI, env=env, cwd=home)
        async with await Toolkit.load(tools=[add]) as toolkit:
            started = time.perf_counter()
            async with client.transport() as transport:
                messages: list[UserMessage | AssistantMessage | ToolMessage] = [UserMessage(content=PROMPT)]
                while True:
                    reply = await transport.generate(ModelRequest(messages=messages, tools=toolkit.specs()))
                    if not reply.tool_calls:
                        break
                    messages.append(AssistantMessage(tool_calls=reply.tool_calls))
                    for call in reply.tool_calls:
                        arguments = json.loads(call.function.arguments)
                        messages.append(ToolMessage(tool_call_id=call.id, content=str(arguments["a"] + arguments["b"])))
            wall = time.perf_counter() - started
    if reply.content != "It is 9.":
        raise RuntimeError(f"{style.value}: one-shot answered {reply.content!r}")
    return count(server, wall)


def request() -> ModelRequest:
    return ModelRequest(messages=[UserMessage(content=PROMPT)])


def median(runs: list[Figures]) -> Figures:
    return Figures(
        statistics.median(r.wall for r in runs),
        round(statistics.median(r.turns for r in runs)),
        round(statistics.median(r.side for r in runs)),
        statistics.median(r.turn_bytes for r in runs),
        round(statistics.median(r.all_bytes for r in runs)),
    )


async def main(repeat: int, only: set[str], transports: set[str]) -> None:
    print(f"load average: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(f"{'agent':7} {'transport':9} {'wall':>7} {'turns':>5} {'side':>4} {'KB/turn req':>11} {'KB all':>7}")
    for style in (CliStyles.CLAUDE, CliStyles.CODEX):
        if only and style.value not in only:
            continue
        name, adapter_name = AGENTS[style]
        command, adapter = installed(name), installed(adapter_name) if adapter_name else None
        if command is None:
            print(f"{style.value:7} not installed: run .ci/install-agents")
            continue
        for transport in ("one-shot", "acp"):
            if transports and transport not in transports:
                continue
            runs = []
            for _ in range(repeat):
                runs.append(
                    await (acp_run(style, command, adapter) if transport == "acp" else one_shot_run(style, command))
                )
            m = median(runs)
            print(
                f"{style.value:7} {transport:9} {m.wall:6.2f}s {m.turns:5} {m.side:4}"
                f" {m.turn_bytes / 1000:11.1f} {m.all_bytes / 1000:7.1f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated style names (claude, codex)")
    parser.add_argument("--transports", default="", help="comma-separated: one-shot, acp")
    options = parser.parse_args()
    os.environ.setdefault("DO_NOT_TRACK", "1")
    anyio.run(
        main, options.repeat, {s for s in options.only.split(",") if s}, {s for s in options.transports.split(",") if s}
    )
