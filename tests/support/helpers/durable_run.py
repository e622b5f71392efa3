"""A three-turn run with parallel calls, in a process of its own, for the fault tests.

Turn 0 calls ``charge`` and ``notify`` at once, turn 1 calls ``charge`` and ``audit`` at
once, turn 2 answers with every tool result. Every model turn and every side effect is
appended to files under ``LOG_DIR`` so a test can count them across processes.

A run to be killed lists each step record it stored in ``LOG_DIR/stored``. ``--kill-after
K`` SIGKILLs this process right after the K-th is stored (the rename that makes it visible
has happened), with its process group when it leads one (an embedded Prefect server, its
child, dies with it, as under a terminal's or a service manager's kill); ``--hold S`` makes ``charge`` sleep S seconds,
``--hold-until PATH`` makes it wait until PATH exists (to keep a run alive while another
process starts the same session). ``--limit NAME`` holds a subscription limit of one slot
for each turn, and ``--die-in-turn N`` SIGKILLs the process (and its group) while the model
answers turn N, its slot held.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio

import nexusflow._prefect.storage as storage
from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool

parser = argparse.ArgumentParser()
parser.add_argument("session")
parser.add_argument("log_dir", type=Path)
parser.add_argument("--kill-after", type=int, default=0)
parser.add_argument("--hold", type=float, default=0.0)
parser.add_argument("--hold-until", type=Path)
parser.add_argument("--prompt", default="pay")
parser.add_argument("--limit")
parser.add_argument("--die-in-turn", type=int)
args = parser.parse_args()


def record(name: str, line: str) -> None:
    with open(args.log_dir / name, "a") as handle:
        handle.write(line + "\n")


def die() -> None:
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


stored = 0
write, put, sync = storage.write_atomically, storage._put_in_place, storage.sync_step_record

counting = threading.Lock()


def count_then_maybe_die(path: Path) -> None:
    """Parallel calls store from worker threads: count under a lock, or two records
    stored at once could both miss the k-th."""
    global stored
    if "/steps/" in path.as_posix():
        with counting:
            stored += 1
            record("stored", "/".join([*path.parts[-3:-1], path.name.split("-")[0]]))
            if stored == args.kill_after:
                die()


def write_then_maybe_die(path: Path, content: bytes) -> None:
    write(path, content)
    count_then_maybe_die(path)


def place_then_maybe_die(path: Path, content: bytes, in_place: Callable[[], None]) -> None:
    """A step record is stored once it is in place, before the run hears so: a SIGKILL keeps
    it (its sync is for a power failure), and the kill falls between two steps (counted at
    its sync, it fell wherever the next model turn, which does not wait for it, had got to)."""
    handle = put(path, content, sync=False)
    count_then_maybe_die(path)
    in_place()
    sync(handle, path)


if args.kill_after or args.die_in_turn is not None:  # a run to be killed says what it stored
    storage.write_atomically = write_then_maybe_die
    storage._write_step_record_then_sync = place_then_maybe_die


@tool
def charge(amount: int) -> str:
    """A side effect that must happen once."""
    if args.hold:
        time.sleep(args.hold)
    if args.hold_until:
        record("holding", str(amount))
        deadline = time.monotonic() + 300
        while not args.hold_until.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    record("charges", str(amount))
    return f"charged {amount}"


@tool
def notify(who: str) -> str:
    """Another side effect."""
    record("notifications", who)
    return f"notified {who}"


@tool
def audit(note: str) -> str:
    """A third."""
    record("audits", note)
    return f"audited {note}"


def model(request: ModelRequest):
    turn = sum(m.role == "assistant" for m in request.messages)
    record("model_turns", str(turn))
    if turn == args.die_in_turn:
        die()
    if turn == 0:
        return {
            "tool_calls": [
                {"id": "a", "name": "charge", "arguments": {"amount": 1}},
                {"id": "b", "name": "notify", "arguments": {"who": "ops"}},
            ]
        }
    if turn == 1:
        return {
            "tool_calls": [
                {"id": "c", "name": "charge", "arguments": {"amount": 100}},
                {"id": "d", "name": "audit", "arguments": {"note": "ok"}},
            ]
        }
    return "done: " + ", ".join(m.content for m in request.messages if m.role == "tool")


async def main() -> None:
    async with await Toolkit.load(tools=[charge, notify, audit]) as toolkit:
        limit = {"limit": args.limit, "max_concurrent": 1} if args.limit else {}
        result = await create_in_process_client(model, **limit).run(args.prompt, toolkit, session_id=args.session)
    print(result.model_dump_json())


anyio.run(main)
