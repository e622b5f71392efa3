"""N agent runs at once in this process (two turns, one tool call each); prints one line
per run: its marker, status, text or error. Used by the concurrency tests."""

from __future__ import annotations

import json
import sys

import anyio

from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool

count, prefix = int(sys.argv[1]), sys.argv[2]


@tool
def double(n: int) -> int:
    """Double a number."""
    return n * 2


def model(request: ModelRequest):
    if request.messages[-1].role == "user":
        n = int(request.messages[-1].content.split()[-1])
        return {"tool_calls": [{"name": "double", "arguments": {"n": n}}]}
    return f"{request.messages[0].content} -> {request.messages[-1].content}"


async def main() -> None:
    client = create_in_process_client(model)
    results: dict[int, str] = {}
    async with await Toolkit.load(tools=[double]) as toolkit:

        async def one(index: int) -> None:
            try:
                result = await client.run(f"run {index}", toolkit, session_id=f"{prefix}-{index}")
                results[index] = json.dumps({"status": result.status, "text": result.text, "error": result.error})
            except BaseException as exc:  # the test asserts none is raised
                results[index] = json.dumps({"status": "raised", "error": f"{type(exc).__name__}: {exc}"})
                raise

        async with anyio.create_task_group() as group:
            for index in range(count):
                group.start_soon(one, index)
    for index in range(count):
        print(index, results[index])


anyio.run(main)
