"""A replay of a committed ACP cassette (``tests/cassettes/acp-<agent>.json``) in a process of
its own, for the crash test: the agent's one turn calls ``add``, its call runs, the agent
answers. Every ``add`` (the side effect) is a line in ``LOG_DIR/<session>.log``, so a test
counts them across a kill and its resume. Run again with the same session, it resumes the
agent's recorded session and asks only for what the store does not hold.

    python acp_cassette_replay.py STYLE SESSION LOG_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
from acp_cassette import committed, replay

from nexusflow import CliStyles, tool
from nexusflow.testing import Cassette

STYLE, SESSION, LOG_DIR = CliStyles(sys.argv[1]), sys.argv[2], Path(sys.argv[3])


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    with open(LOG_DIR / f"{SESSION}.log", "a") as handle:
        handle.write(f"{os.getpid()} add {a} {b}\n")
    return a + b


async def main() -> None:
    cassette = Cassette(committed(STYLE), "replay")
    result = await replay(STYLE, cassette, LOG_DIR, tools=[add], session_id=SESSION)
    calls = [call.name for message in result.messages for call in getattr(message, "tool_calls", None) or []]
    paid = result.metrics.usage + result.metrics.replayed_usage  # a resume spends only what it runs
    print(json.dumps([result.status, result.text, result.error, calls, len(result.messages), paid.shown()]))


anyio.run(main)
