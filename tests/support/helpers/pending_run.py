"""A run whose tool asks for approval, for cross-process tests: ``start SESSION DIR`` runs it
until it is pending; ``resume SESSION DIR yes|no`` answers it from a fresh process.
Model turns and the tool's side effect are appended to files under DIR."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from nexusflow import Answer, ModelRequest, Toolkit, create_in_process_client, current_answer, suspend, tool

mode, session, folder, *rest = sys.argv[1:]
root = Path(folder)


def record(name: str, line: str) -> None:
    with open(root / name, "a") as handle:
        handle.write(line + "\n")


@tool
def delete_files(pattern: str) -> str:
    """Delete files matching a pattern, after approval."""
    answer = current_answer()
    if answer is None:
        return suspend(f"May I delete every file matching {pattern}?")
    record("deleted", pattern)
    return f"deleted {pattern} (approved: {answer.data})"


def model(request: ModelRequest):
    turn = sum(m.role == "assistant" for m in request.messages)
    record("model_turns", str(turn))
    if turn == 0:
        return {"tool_calls": [{"name": "delete_files", "arguments": {"pattern": "*.tmp"}}]}
    return "done: " + request.messages[-1].content


async def main() -> None:
    client = create_in_process_client(model)
    async with await Toolkit.load(tools=[delete_files]) as toolkit:
        if mode == "start":
            result = await client.run("clean up", toolkit, session_id=session)
        else:
            answer = Answer(id=f"{session}.0.0", ok=rest[0] == "yes", data={"by": "ops"})
            result = await client.resume(session, answer, toolkit)
    print(result.model_dump_json())


anyio.run(main)
