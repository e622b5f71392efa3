"""What a short real run costs the model provider: requests, bytes a request, wall time,
and how much of each request repeats the one before (what a provider's cache can reuse).

    python benchmarks/real_run.py [--repeat 3] [--calls 2] [--only claude,codex] [--transports acp,one-shot]

Per pinned real agent (claude, codex; installed by ``.ci/install-agents``) and transport, a
run on the scripted model server: the model calls ``add`` ``--calls`` times in sequence (2: a
3-turn run; 6: the issue's 7 turns), then answers. Counted at the server: the model requests
of the run's turns, the agent's side requests (titles, suggestions, probes), the mean bytes
of a turn's request body, the bytes of all requests; the wall time of the run (agent start
and close included); and, from the second turn on, the mean share of a turn's request that
repeats the previous turn's: as a prefix of its text (system, tools, messages, in order: what
a token-prefix cache such as OpenAI's reuses) and as whole leading blocks (what Anthropic's
block cache reuses), and the prompt-cache keys the turns sent (one per run is what a cache
keyed by it needs). Medians of ``--repeat``. The transports run without Prefect, so the
figures are the agents' and ours, not the engine's; notes: ``notes/real_run.md``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import anyio
from real_agents import AGENTS, acp_session, installed

from nexusflow import CliStyles, ModelRequest, Toolkit, Transport, create_cli_client, tool
from nexusflow.messages import AssistantMessage, ToolMessage, UserMessage
from nexusflow.testing import ScriptedModelServer, ScriptedReply
from nexusflow.testing.conformance import default_model, scripted_cli

PROMPT = "Add 2 and 3 with the add tool, then keep adding 4 to the result with it."


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
    prefix: float
    blocks: float
    cache_keys: int


def count(server: ScriptedModelServer, wall: float) -> Figures:
    model = [r for r in server.requests if r.api is not None]
    sizes = [len(json.dumps(r.body)) for r in model]
    bodies = [r.body for r in model if not r.side]
    turns = [len(json.dumps(body)) for body in bodies]
    pairs = list(itertools.pairwise(bodies))
    return Figures(
        wall,
        len(turns),
        len(model) - len(turns),
        statistics.mean(turns) if turns else 0,
        sum(sizes),
        statistics.mean(prefix_share(a, b) for a, b in pairs) if pairs else 0.0,
        statistics.mean(block_share(a, b) for a, b in pairs) if pairs else 0.0,
        len({body.get("prompt_cache_key") for body in bodies if body.get("prompt_cache_key")}),
    )


def blocks(body: dict[str, Any]) -> list[str]:
    """A request's blocks in the order a provider reads them: its system prompt or
    instructions, its tools, then each message's content blocks (Anthropic) or each input item
    (OpenAI's Responses) without its ``id`` (an item's id is no text the model reads; codex
    gives every item a new one at each launch); each as its JSON text."""
    found: list[str] = []
    for key in ("system", "instructions", "tools"):
        value = body.get(key)
        found += [json.dumps(v) for v in value] if isinstance(value, list) else [json.dumps(value)] if value else []
    for message in body.get("messages") or body.get("input") or []:
        if not isinstance(message, dict):
            found.append(json.dumps(message))
            continue
        content = message.get("content")
        if isinstance(content, list) and "messages" in body:
            found += [json.dumps({"role": message.get("role"), **c}) for c in content]
        else:
            found.append(json.dumps({k: v for k, v in message.items() if k != "id"}))
    return found


def prefix_share(before: dict[str, Any], after: dict[str, Any]) -> float:
    """The share of ``after``'s text that repeats ``before``'s from its start."""
    a, b = "".join(blocks(before)), "".join(blocks(after))
    same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return same / len(b) if b else 0.0


def block_share(before: dict[str, Any], after: dict[str, Any]) -> float:
    """The share of ``after``'s text in leading blocks equal to ``before``'s."""
    a, b = blocks(before), blocks(after)
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += len(y)
    total = sum(len(y) for y in b)
    return same / total if total else 0.0


def sums(calls: int) -> list[tuple[int, int]]:
    """The additions the model asks for in turn: 2 + 3, then 4 more each time."""
    total, asked = 2, []
    for step in range(calls):
        added = 3 if step == 0 else 4
        asked.append((total, added))
        total += added
    return asked


def answer(calls: int) -> str:
    a, b = sums(calls)[-1]
    return f"It is {a + b}."


async def acp_run(style: CliStyles, command: str, adapter: str | None, calls: int) -> Figures:
    replies = [*(ScriptedReply.call("add", {"a": a, "b": b}) for a, b in sums(calls)), answer(calls)]
    async with scripted_cli(style, replies, acp=True) as (server, home, env):
        async with await Toolkit.load(tools=[add]) as toolkit:
            started = time.perf_counter()
            async with acp_session(style, command, adapter, home, env, toolkit) as session:
                reply = await session.generate(request())
            wall = time.perf_counter() - started
    if not (reply.content or "").endswith(answer(calls)):
        raise RuntimeError(f"{style.value}: ACP answered {reply.content!r}")
    return count(server, wall)


async def one_shot_run(style: CliStyles, command: str, calls: int) -> Figures:
    def call(a: int, b: int) -> str:
        return json.dumps({"tool_calls": [{"id": f"c{a}", "name": "add", "arguments": {"a": a, "b": b}}]})

    replies = [*(call(a, b) for a, b in sums(calls)), json.dumps({"content": answer(calls)})]
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
    if reply.content != answer(calls):
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
        statistics.median(r.prefix for r in runs),
        statistics.median(r.blocks for r in runs),
        round(statistics.median(r.cache_keys for r in runs)),
    )


async def main(repeat: int, calls: int, only: set[str], transports: set[str]) -> None:
    print(f"load average: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(
        f"{'agent':7} {'transport':9} {'wall':>7} {'turns':>5} {'side':>4} {'KB/turn req':>11} {'KB all':>7}"
        f" {'prefix':>6} {'blocks':>6} {'keys':>4}"
    )
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
                    await (
                        acp_run(style, command, adapter, calls)
                        if transport == "acp"
                        else one_shot_run(style, command, calls)
                    )
                )
            m = median(runs)
            print(
                f"{style.value:7} {transport:9} {m.wall:6.2f}s {m.turns:5} {m.side:4}"
                f" {m.turn_bytes / 1000:11.1f} {m.all_bytes / 1000:7.1f}"
                f" {m.prefix:6.2f} {m.blocks:6.2f} {m.cache_keys:4}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2, help="tool calls in sequence before the answer")
    parser.add_argument("--only", default="", help="comma-separated style names (claude, codex)")
    parser.add_argument("--transports", default="", help="comma-separated: one-shot, acp")
    options = parser.parse_args()
    os.environ.setdefault("DO_NOT_TRACK", "1")
    anyio.run(
        main,
        options.repeat,
        options.calls,
        {s for s in options.only.split(",") if s},
        {s for s in options.transports.split(",") if s},
    )
