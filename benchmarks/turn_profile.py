"""Where a turn's client CPU goes: cProfile of 1-turn and N-turn runs of nexusflow and of the
floor (``loop_overhead.py``'s contenders), in one process against one Prefect server, and per
function the time per extra turn, (time at N - time at 1) / (N - 1) over the runs.

The profile covers the event loop's thread only: Prefect's log and event workers and the
worker threads a record's write hops to are not in it (``loop_overhead.py``'s client CPU
counts every thread). The printed table lists the functions whose cumulative time per extra
turn is largest, ours (``nexusflow/``) apart from Prefect's and the rest, for each contender;
``--dump DIR`` keeps the four profiles for ``pstats`` or snakeviz.

    python benchmarks/turn_profile.py                  # 60 turns, 3 runs of each length
    python benchmarks/turn_profile.py --turns 20 --runs 1 --top 40
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import this_process_on_a_new_server
from loop_overhead import Floor, Nexusflow, drain, load

Function = tuple[str, int, str]


async def profiles(turns: int, runs: int) -> dict[tuple[str, int], tuple[pstats.Stats, float]]:
    """A profile of ``runs`` runs of each contender at 1 and ``turns`` turns, with the
    process's CPU over them (every thread), after one warm-up run of each."""
    from nexusflow import Toolkit, tool

    @tool
    async def noop(step: int) -> int:
        """Returns its argument."""
        return step

    found: dict[tuple[str, int], tuple[pstats.Stats, float]] = {}
    async with await Toolkit.load(tools=[noop]) as toolkit:
        contenders: dict[str, Any] = {"nexusflow": Nexusflow(toolkit, turns), "floor": Floor()}
        for contender in contenders.values():
            await contender.fresh(2)()
        for name, contender in contenders.items():
            for length in (1, turns):
                profile = cProfile.Profile()
                cpu = time.process_time()
                for _ in range(runs):
                    profile.enable()
                    await contender.fresh(length)()
                    profile.disable()
                found[name, length] = (pstats.Stats(profile), time.process_time() - cpu)
                print(f"{name} {length} turns x {runs}: CPU {found[name, length][1]:.2f} s; load {load()}", flush=True)
    await drain()
    return found


def per_extra_turn(
    short: pstats.Stats, long: pstats.Stats, turns: int, runs: int
) -> dict[Function, tuple[float, float, int]]:
    """Function -> (own time, cumulative time, calls) per extra turn."""
    one: dict[Function, Any] = short.stats  # type: ignore[attr-defined]
    many: dict[Function, Any] = long.stats  # type: ignore[attr-defined]
    scale = (turns - 1) * runs
    result = {}
    for function, (_, calls, own, cumulative, _) in many.items():
        _, calls_1, own_1, cumulative_1, _ = one.get(function, (0, 0, 0.0, 0.0, None))
        result[function] = (
            (own - own_1) / scale,
            (cumulative - cumulative_1) / scale,
            round((calls - calls_1) / scale),
        )
    return result


def where(function: Function) -> str:
    path, line, name = function
    for marker in ("/nexusflow/", "/site-packages/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{line}({name})"


IDLE = "<method 'poll' of 'select.epoll' objects>"
"""The event loop waiting for I/O: time on the loop's thread, not CPU."""


def report(found: dict[tuple[str, int], tuple[pstats.Stats, float]], turns: int, runs: int, top: int) -> None:
    for name in ("nexusflow", "floor"):
        (short, cpu_1), (long, cpu_n) = found[name, 1], found[name, turns]
        rows = {f: row for f, row in per_extra_turn(short, long, turns, runs).items() if f[2] != IDLE}
        busy = sum(own for own, _, _ in rows.values())
        print(
            f"\n== {name}: per extra turn, CPU {(cpu_n - cpu_1) / (turns - 1) / runs * 1000:.2f} ms (every thread),"
            f" busy on the loop's thread {busy * 1000:.2f} ms"
        )
        ours = {f: row for f, row in rows.items() if "/nexusflow/" in f[0] and "site-packages" not in f[0]}
        tables = (("ours, by cumulative time", ours, 1), ("all, by own time", rows, 0))
        for title, chosen, column in tables:
            print(f"  -- {title}: own ms, cumulative ms, calls per extra turn")
            ordered = sorted(chosen.items(), key=lambda item: item[1][column], reverse=True)
            for function, (own, cumulative, calls) in ordered[:top]:
                print(f"  {own * 1000:8.3f} {cumulative * 1000:8.3f} {calls:5d}  {where(function)}")


def main(options: argparse.Namespace) -> None:
    import anyio

    print(f"turn_profile: {options.turns} turns, {options.runs} run(s) each; {os.cpu_count()} cores, load {load()}")
    with ExitStack() as stack:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        if not os.environ.get("PREFECT_API_URL"):
            this_process_on_a_new_server("nexusflow-turn-profile-", stack)
        found = anyio.run(profiles, options.turns, options.runs)
    if options.dump:
        options.dump.mkdir(parents=True, exist_ok=True)
        for (name, length), (stats, _) in found.items():
            stats.dump_stats(str(options.dump / f"{name}-{length}.prof"))
    report(found, options.turns, options.runs, options.top)
    print(f"\nload {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3, help="runs of each length in one profile")
    parser.add_argument("--top", type=int, default=25, help="rows per table")
    parser.add_argument("--dump", type=Path, help="a folder for the four profiles")
    main(parser.parse_args())
