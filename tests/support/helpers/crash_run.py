"""A run that dies hard (``os._exit``) inside the second tool call of turn 1, once the first
call's result is persisted; run again with ``--no-crash`` to resume the same session.

Every model turn and every side effect is appended to files under ``LOG_DIR``, so the test
can count them across both processes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import anyio

from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool

parser = argparse.ArgumentParser()
parser.add_argument("session")
parser.add_argument("log_dir", type=Path)
parser.add_argument("--no-crash", action="store_true")
args = parser.parse_args()

STORAGE = Path(os.environ["PREFECT_LOCAL_STORAGE_PATH"])


def record(name: str, line: str) -> None:
    with open(args.log_dir / name, "a") as handle:
        handle.write(line + "\n")


def stored(path: Path) -> bool:
    """A whole result record, not one Prefect is still writing (the file exists first)."""
    try:
        return bool(json.loads(path.read_bytes()))
    except (OSError, ValueError):
        return False


@tool
def charge(amount: int) -> str:
    """A side effect that must happen once."""
    record("charges", str(amount))
    return f"charged {amount}"


@tool
def notify(who: str) -> str:
    """The call the process dies in, after charge's result is stored."""
    if not args.no_crash:
        deadline = time.monotonic() + 60
        while not any(stored(path) for path in STORAGE.glob(f"nexusflow/sessions/{args.session}/steps/1/tool/0-*")):
            if time.monotonic() > deadline:
                sys.exit("charge's result was never persisted")
            time.sleep(0.05)
        record("crashes", who)
        os._exit(17)
    record("notifications", who)
    return f"notified {who}"


def model(request: ModelRequest):
    turn = sum(m.role == "assistant" for m in request.messages)
    record("model_turns", str(turn))
    if turn == 0:
        return {"tool_calls": [{"name": "charge", "arguments": {"amount": 1}}]}
    if turn == 1:
        return {
            "tool_calls": [
                {"name": "charge", "arguments": {"amount": 100}},
                {"name": "notify", "arguments": {"who": "ops"}},
            ]
        }
    return "done: " + ", ".join(m.content for m in request.messages if m.role == "tool")


async def main() -> None:
    async with await Toolkit.load(tools=[charge, notify]) as toolkit:
        result = await create_in_process_client(model).run("pay", toolkit, session_id=args.session)
    print(result.model_dump_json())


anyio.run(main)
