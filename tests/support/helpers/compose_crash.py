"""A writer agent that calls a reviewer agent as a tool; the reviewer looks a rule up, and
in its second turn (unless ``--no-crash``) says so in ``LOG_DIR/in_second_turn`` and hangs,
for the test to SIGKILL the process. Run again with ``--no-crash`` to resume the writer.
With ``--native`` there is no writer: the reviewer runs inside a user's own ``@task`` in a
``@flow`` (the Prefect-native way), and its result is printed.

Every model request is appended to ``LOG_DIR/<agent>_turns`` and every lookup to
``LOG_DIR/lookups``, so the test counts them across both processes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import anyio
from prefect import flow, task

from nexusflow import ModelRequest, RunResult, Toolkit, create_in_process_client, tool

parser = argparse.ArgumentParser()
parser.add_argument("session")
parser.add_argument("log_dir", type=Path)
parser.add_argument("--no-crash", action="store_true")
parser.add_argument("--native", action="store_true")
args = parser.parse_args()


def record(name: str, line: str) -> None:
    with open(args.log_dir / name, "a") as handle:
        handle.write(line + "\n")


def turn_of(request: ModelRequest) -> int:
    return sum(message.role == "assistant" for message in request.messages)


@tool
def lookup(topic: str) -> str:
    """Look up the house rule on a topic."""
    record("lookups", topic)
    return f"the rule on {topic}: short sentences"


def reviewer_model(request: ModelRequest):
    turn = turn_of(request)
    record("reviewer_turns", str(turn))
    if turn == 0:
        return {"tool_calls": [{"name": "lookup", "arguments": {"topic": "style"}}]}
    if not args.no_crash:
        (args.log_dir / "in_second_turn").write_text("yes")
        time.sleep(600)
    return f"approved ({request.messages[-1].content})"


def writer_model(request: ModelRequest):
    turn = turn_of(request)
    record("writer_turns", str(turn))
    if turn == 0:
        return {"tool_calls": [{"name": "reviewer", "arguments": {"prompt": "Review: Agents compose."}}]}
    return f"published after review: {request.messages[-1].content}"


async def native(tools: Toolkit) -> RunResult:
    reviewer = create_in_process_client(reviewer_model)

    @task
    async def review(draft: str) -> RunResult:
        return await reviewer.run(f"Review: {draft}", tools, session_id=f"{args.session}.review")

    @flow
    async def publish() -> RunResult:
        return await review("Agents compose.")

    return await publish()


async def main() -> None:
    async with await Toolkit.load(tools=[lookup]) as tools:
        if args.native:
            print((await native(tools)).model_dump_json())
            return
        reviewer = create_in_process_client(reviewer_model).as_tool(
            name="reviewer", description="Review a draft against the house rules.", toolkit=tools
        )
        writer = create_in_process_client(writer_model)
        result = await writer.run("Write and review a line.", Toolkit([reviewer]), session_id=args.session)
    print(result.model_dump_json())


anyio.run(main)
