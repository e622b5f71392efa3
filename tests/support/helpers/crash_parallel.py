"""Two tool calls at once, for ``crash_at_every_step``: turn 0 asks for ``fast`` and ``slow``,
turn 1 answers with both results. ``fast`` returns once ``slow`` has started, and ``slow``
takes ``HOLD`` seconds more, so a kill after ``fast``'s record is stored always finds
``slow`` in flight (``LOG_DIR/<session>.slow`` says it started).

    python crash_parallel.py SESSION LOG_DIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool

SESSION, LOG_DIR = sys.argv[1], Path(sys.argv[2])
STARTED = LOG_DIR / f"{SESSION}.slow"
HOLD = 2.0


@tool
def fast() -> str:
    """Returns once slow has started."""
    deadline = time.monotonic() + 60
    while not STARTED.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "fast done"


@tool
def slow() -> str:
    """Still running when fast's record is stored."""
    STARTED.touch()
    time.sleep(HOLD)
    return "slow done"


def model(request: ModelRequest):
    if not any(message.role == "tool" for message in request.messages):
        return {
            "tool_calls": [{"id": "a", "name": "fast", "arguments": {}}, {"id": "b", "name": "slow", "arguments": {}}]
        }
    return "both: " + ", ".join(message.content or "" for message in request.messages if message.role == "tool")


async def main() -> None:
    async with Toolkit([fast, slow]) as toolkit:
        result = await create_in_process_client(model).run("both", toolkit, session_id=SESSION)
    print(result.status, result.text)


anyio.run(main)
