"""What nexusflow's extra cost a turn buys: the floor against nexusflow as shipped, and with
the two things the floor does not do turned off, one at a time and together.

- ``shipped``: nexusflow as it is;
- ``no-sync``: its step records are not synced to disk (``os.fsync`` does nothing), as the
  floor's plain ``LocalFileSystem`` writes are not: what power-failure durability costs;
- ``no-logs``: a turn task and a tool task write no log lines (two a turn: the model's
  decision with the turn's cost, the call's arguments with its result), which the floor
  does not write either: what a task run's page in the UI costs;
- ``bare``: both off: nexusflow's own machinery, to be set against the floor;
- ``turn-waits``: each model turn waits for the records before it to be on disk, as every
  step did before c6d2efb (now only a tool call, a suspension and the run's end wait): what
  that wait cost;
- ``floor+``: the floor doing the same work as shipped nexusflow, the plain way: each record
  written to a temporary file, synced and renamed before its task returns (one worker-thread
  hop), and one log line a turn and one a tool call: what Prefect costs for the same
  guarantees and the same pages, to be set against ``shipped``.

The variants are made by patching this process (a benchmark's means, never the library's):
every variant runs the same client, interleaved with the floor in one process against one
server, in a rotating order; runs of 1 and N turns, per extra turn as in ``loop_overhead.py``
(whose floor, client and measuring this reuses), median over the repetitions.

    python benchmarks/turn_costs.py                   # 40 turns, 8 repetitions
    python benchmarks/turn_costs.py --turns 10 --repeats 2
    python benchmarks/turn_costs.py --turns 60 --repeats 12 --variants shipped,turn-waits,no-sync
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import PrefectServer, this_process_on_a_new_server
from loop_overhead import Floor, Nexusflow, Sample, drain, load, measure

VARIANTS = ("floor", "shipped", "no-sync", "no-logs", "bare", "floor+", "turn-waits")


@contextmanager
def variant(name: str) -> Iterator[None]:
    """Turn off what the variant names, for the runs inside."""
    turn = sys.modules["nexusflow.tasks.turn"]
    tool_call = sys.modules["nexusflow.tasks.tool_call"]
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attribute: str, value: Any) -> None:
        saved.append((owner, attribute, getattr(owner, attribute)))
        setattr(owner, attribute, value)

    if name == "floor+":
        from prefect.filesystems import LocalFileSystem

        async def durable(self: LocalFileSystem, path: str, content: bytes) -> str:
            target = self._resolve_path(path)
            await anyio.to_thread.run_sync(_write_synced, target, content)
            return str(target)

        patch(LocalFileSystem, "awrite_path", durable)
    if name == "turn-waits":
        from nexusflow._prefect.storage import synced

        model_turn = turn.model_turn
        unwaiting = model_turn.fn

        @functools.wraps(unwaiting)  # Prefect binds the task's parameters by its signature
        async def waiting(session_id: str, *args: Any, **kwargs: Any) -> Any:
            await synced(session_id)
            return await unwaiting(session_id, *args, **kwargs)

        patch(model_turn, "fn", waiting)
    if name in ("no-sync", "bare"):
        patch(os, "fsync", lambda handle: None)
    if name in ("no-logs", "bare"):
        silent = logging.getLogger("turn_costs.silent")
        silent.disabled = True
        patch(turn, "_log_decision", lambda record: None)
        patch(tool_call, "get_run_logger", lambda: silent)
    try:
        yield
    finally:
        for owner, attribute, value in reversed(saved):
            setattr(owner, attribute, value)


def _write_synced(target: Path, content: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.part")
    with open(part, "wb") as file:
        file.write(content)
        file.flush()
        os.fsync(file.fileno())
    os.replace(part, target)


async def bench(
    turns: int, repeats: int, idle: float, server: PrefectServer | None, variants: tuple[str, ...] = VARIANTS
) -> dict[str, list[float]]:
    """Per extra turn (wall, CPU) of every variant in every repetition."""
    from nexusflow import Toolkit, tool

    @tool
    async def noop(step: int) -> int:
        """Returns its argument."""
        return step

    per_turn: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    async with await Toolkit.load(tools=[noop]) as toolkit:
        ours, floor = Nexusflow(toolkit, turns), Floor()
        for warm_up in (ours.fresh(1), floor.fresh(1), ours.fresh(turns), floor.fresh(turns)):
            await warm_up()
        for repeat in range(repeats):
            shift = repeat % len(variants)
            for name in variants[shift:] + variants[:shift]:
                contender = floor if name.startswith("floor") else ours
                floor.logged = name == "floor+"
                samples: list[Sample] = []
                with variant(name):
                    for length in (1, turns):
                        samples.append(await measure(contender.fresh(length), idle, server))
                one, many = samples
                per_turn[name].append(((many.wall - one.wall) / (turns - 1), (many.cpu - one.cpu) / (turns - 1)))
            print(f"rep {repeat + 1} of {repeats}; load {load()}", flush=True)
    await drain()
    return {
        f"{name} {what}": [sample[index] for sample in samples]
        for name, samples in per_turn.items()
        for index, what in enumerate(("wall", "cpu"))
    }


def report(figures: dict[str, list[float]], turns: int) -> None:
    print(f"\n== per extra turn, ms, 1 -> {turns} turns; median of {len(figures['floor wall'])} repetition(s)")
    print(f"  {'':10s} {'wall':>8s} {'x floor':>8s} {'x floor+':>9s} {'CPU':>8s} {'x floor':>8s} {'x floor+':>9s}")
    medians = {name: statistics.median(values) for name, values in figures.items()}
    for name in [name for name in VARIANTS if f"{name} wall" in medians]:
        cells = []
        for what in ("wall", "cpu"):
            value = medians[f"{name} {what}"]
            cells.append(
                f"{value * 1000:8.2f} {value / medians[f'floor {what}']:7.2f}x"(
                    f" {value / medians[f'floor+ {what}']:8.2f}x" if f"floor+ {what}" in medians else f" {'-':>9s}"
                )
            )
        print(f"  {name:10s} {' '.join(cells)}")
    print("  (CPU is this process's, every thread: steadier than wall on a machine that also runs the server)")


def main(options: argparse.Namespace) -> None:
    import anyio

    started = time.perf_counter()
    print(f"turn_costs: {options.turns} turns, {options.repeats} repetition(s); {os.cpu_count()} cores, load {load()}")
    with ExitStack() as stack:
        server = None
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        if not os.environ.get("PREFECT_API_URL"):
            server = this_process_on_a_new_server("nexusflow-turn-costs-", stack)
        figures = anyio.run(bench, options.turns, options.repeats, options.idle, server, options.variants)
        report(figures, options.turns)
    print(f"\ndone in {time.perf_counter() - started:.0f} s; load {load()}")


def _variants(text: str) -> tuple[str, ...]:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown: {', '.join(unknown)}")
    return tuple(name for name in VARIANTS if name in chosen or name == "floor")


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"at least {minimum}")
        return value

    return parse


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=_at_least(2), default=40, help="the longer run's turns (the shorter has 1)")
    parser.add_argument("--repeats", type=_at_least(1), default=8)
    parser.add_argument("--idle", type=float, default=2.0, help="seconds after each run for the server to record it")
    parser.add_argument(
        "--variants",
        type=_variants,
        default=VARIANTS,
        help=f"which, comma-separated ({','.join(VARIANTS)}); the floor is always run",
    )
    main(parser.parse_args())
