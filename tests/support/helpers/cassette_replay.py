"""A replay of the committed claude cassette in a process of its own, for the crash test: turn
0 calls ``add``, its call runs, turn 1 answers. Every launch the cassette plays and every
``add`` (the side effect) is a line in ``LOG_DIR/<session>.log``, so a test counts them
across a kill and its resume. It prints what the session cost, replayed turns included.

    python cassette_replay.py SESSION LOG_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

from nexusflow import CliStyles, ModelReply, Toolkit, Transport, create_cli_client, tool
from nexusflow.testing import Cassette
from nexusflow.transports.cassette import Answer, Asked, Scrub

SESSION, LOG_DIR = sys.argv[1], Path(sys.argv[2])
CASSETTE = Path(__file__).parent.parent.parent / "cassettes" / "claude.json"


def log(line: str) -> None:
    with open(LOG_DIR / f"{SESSION}.log", "a") as handle:
        handle.write(f"{os.getpid()} {line}\n")


class Counted(Cassette):
    def play(self, asked: Asked, turn: int | None, launch: int, scrub: Scrub) -> Answer | ModelReply:
        answer = super().play(asked, turn, launch, scrub)
        log(f"played turn-{turn}")
        return answer


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    log(f"add {a} {b}")
    return a + b


async def main() -> None:
    cassette = Counted(CASSETTE, "replay")
    client = create_cli_client(CliStyles.CLAUDE, "claude", "scripted-model", transport=Transport.CLI, cassette=cassette)
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client.run("What is 2+3? Use the add tool.", toolkit, session_id=SESSION)
    calls = [call.name for message in result.messages for call in getattr(message, "tool_calls", None) or []]
    paid = result.metrics.usage + result.metrics.replayed_usage  # a resume spends only what it runs
    print(result.status, repr(result.text), calls, len(result.messages), paid.shown())


anyio.run(main)
