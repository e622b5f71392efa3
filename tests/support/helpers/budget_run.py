"""A run with a budget whose every turn costs $0.01 and calls ``step``; with ``--crash``
the process dies (``os._exit``) in the second call, after two turns were spent. Prints the
result as JSON."""

from __future__ import annotations

import argparse
import os

import anyio

from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool

parser = argparse.ArgumentParser()
parser.add_argument("session")
parser.add_argument("--crash", action="store_true")
args = parser.parse_args()
calls = 0


@tool
def step() -> str:
    """One step of the job."""
    global calls
    calls += 1
    if args.crash and calls == 2:
        os._exit(17)
    return f"step {calls} done"


def model(request: ModelRequest):
    turn = sum(m.role == "assistant" for m in request.messages)
    usage = {"input_tokens": 100, "output_tokens": 10, "cost_usd": 0.01}
    if turn < 5:
        return {"tool_calls": [{"name": "step", "arguments": {}}], "usage": usage}
    return {"content": "all steps done", "usage": usage}


async def main() -> None:
    client = create_in_process_client(model, max_cost_usd=0.03, max_turns=10)
    result = await client.run("do the job", Toolkit([step]), session_id=args.session)
    print(result.model_dump_json())


anyio.run(main)
