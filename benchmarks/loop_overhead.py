"""What Prefect costs per turn: the same agent loop with and without Prefect, in one process.

An N-turn run with an instant in-process model (each turn but the last calls one instant
tool) runs (a) as the ``agent_run`` flow, every turn and tool call a persisted task run,
and (b) through the very same loop with plain function steps. Prints milliseconds per
turn for both and the ratios; a 1-turn run separates the fixed cost of a flow run from
the cost of each further turn.

    python benchmarks/loop_overhead.py [--turns 40] [--repeats 3]

Uses PREFECT_API_URL when set, else Prefect's ephemeral local server (its start-up is
excluded: one warm-up run goes first).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import anyio

from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool
from nexusflow.flows.loop import LoopState, drive, opening_messages
from nexusflow.tasks import ToolRuntime, TurnRuntime, execute_tool, produce_turn
from nexusflow.transports import InProcessTransport


@tool
def noop(step: int) -> int:
    """Returns its argument."""
    return step


def instant_model(turns: int):
    def generate(request: ModelRequest):
        step = sum(m.role == "assistant" for m in request.messages)
        if step < turns - 1:
            return {"tool_calls": [{"name": "noop", "arguments": {"step": step}}]}
        return "done"

    return generate


async def plain(turns: int, toolkit: Toolkit) -> float:
    started = time.perf_counter()
    model = TurnRuntime(transport=InProcessTransport(instant_model(turns)))
    tools = ToolRuntime(toolkit=toolkit)
    state = LoopState(opening_messages("bench", None, None))

    async def turn(step: int, request: ModelRequest):
        return await produce_turn(request, model), False

    async def call(step: int, index: int, tool_call):
        return await execute_tool(tool_call, tools), False

    text = await drive(state, tools=toolkit.specs(), model=None, max_turns=turns, run_turn=turn, run_tool=call)
    assert text == "done"
    return time.perf_counter() - started


async def with_prefect(turns: int, toolkit: Toolkit) -> float:
    client = create_in_process_client(instant_model(turns), max_turns=turns)
    started = time.perf_counter()
    result = await client.run("bench", toolkit, session_id=f"bench-{uuid.uuid4().hex}")
    elapsed = time.perf_counter() - started
    assert result.status == "completed" and result.metrics.turns == turns, result.error
    return elapsed


async def main(turns: int, repeats: int, idle: float) -> None:
    async with await Toolkit.load(tools=[noop]) as toolkit:
        await with_prefect(2, toolkit)
        single, runs = [], []
        for _ in range(repeats):
            await anyio.sleep(idle)
            single.append(await with_prefect(1, toolkit))
            await anyio.sleep(idle)
            runs.append(await with_prefect(turns, toolkit))
        plain_runs = [await plain(turns, toolkit) for _ in range(repeats)]
    plain_ms = statistics.median(plain_runs) / turns * 1000
    run_ms = statistics.median(runs) * 1000
    fixed_ms = statistics.median(single) * 1000
    marginal_ms = (run_ms - fixed_ms) / (turns - 1)
    print(f"{turns} turns per run ({turns - 1} tool calls); median of {repeats}; server idle {idle:.0f} s first")
    print(f"plain Python loop          : {plain_ms:9.3f} ms/turn")
    print(f"agent_run, whole run       : {run_ms / turns:9.3f} ms/turn  ({run_ms:.0f} ms per run)")
    print(f"agent_run, a 1-turn run    : {fixed_ms:9.3f} ms  (flow start, end, transcript artifact)")
    print(f"agent_run, each extra turn : {marginal_ms:9.3f} ms/turn  (a turn task and a tool task)")
    print(f"ratio, extra turn / plain  : {marginal_ms / plain_ms:9.1f}x")
    print(f"ratio, whole run / plain   : {run_ms / turns / plain_ms:9.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--idle", type=float, default=5.0, help="seconds to let the server record the previous run before the next"
    )
    options = parser.parse_args()
    anyio.run(main, options.turns, options.repeats, options.idle)
