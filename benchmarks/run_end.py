"""Whether the end of a run grows with the run, or the server's backlog does.

The end of a run is the last model call to the run's return: the last turn's task run, then
what the run does on its way out (nexusflow: its last records synced, the session lease
released and the transcript, summary and progress artifacts written side by side, then the
flow's final state; the floor: the final state). Right after a long run the server is still
recording the run's task runs (seconds after 200 instant turns), and every request of the end
queues behind that backlog. To tell the two apart, each contender also runs with its last
turn waiting, before its model call, until the server has gone quiet (its CPU under 10 % for
half a second, as ``loop_overhead.py`` waits between runs; up to 60 s): the end then costs
only itself.

For 1, 40 and 200 turns (``--turns``), the floor and nexusflow (``loop_overhead.py``'s), each
plain and with the quiet wait, interleaved in a rotating order; medians over ``--repeats``,
in ms, and the seconds the server took to go quiet.

    python benchmarks/run_end.py                     # 1,40,200 turns x 5
    python benchmarks/run_end.py --turns 1,10 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import PrefectServer, this_process_on_a_new_server
from loop_overhead import Floor, Nexusflow, drain, load, measure

CONTENDERS = ("floor", "nexusflow", "floor, quiet", "nexusflow, quiet")
QUIET_MAX = 60.0


async def bench(lengths: list[int], repeats: int, idle: float, server: PrefectServer) -> dict[tuple[str, int], list]:
    """(contender, turns) -> (end in s, seconds the quiet wait took) per repetition."""
    from nexusflow import Toolkit, tool

    waited: list[float] = []

    async def quiet() -> None:
        waited.append(await server.quiet(QUIET_MAX))

    @tool
    async def noop(step: int) -> int:
        """Returns its argument."""
        return step

    ends: dict[tuple[str, int], list] = {}
    async with await Toolkit.load(tools=[noop]) as toolkit:
        ours, floor = Nexusflow(toolkit, max(lengths)), Floor()
        for warm_up in (ours.fresh(2), floor.fresh(2)):
            await warm_up()
        for repeat in range(repeats):
            for turns in lengths:
                shift = (repeat + turns) % len(CONTENDERS)
                for name in CONTENDERS[shift:] + CONTENDERS[:shift]:
                    contender = floor if name.startswith("floor") else ours
                    contender.before_last = quiet if name.endswith("quiet") else None
                    waited.clear()
                    sample = await measure(contender.fresh(turns), idle, server)
                    assert sample.end is not None
                    ends.setdefault((name, turns), []).append((sample.end, sum(waited)))
            print(f"rep {repeat + 1} of {repeats}; load {load()}", flush=True)
    await drain()
    return ends


def report(ends: dict[tuple[str, int], list], lengths: list[int], repeats: int) -> None:
    print(f"\n== end of run, ms (last model call to return); median of {repeats} repetition(s)")
    print(f"  {'turns':16s}" + "".join(f"{turns:>9d}" for turns in lengths) + "   longest / 1 turn")
    for name in CONTENDERS:
        medians = [statistics.median(end for end, _ in ends[name, turns]) * 1000 for turns in lengths]
        print(f"  {name:16s}" + "".join(f"{value:9.1f}" for value in medians) + f"   {medians[-1] / medians[0]:.2f}x")
    print("  the server went quiet after, s (median, nexusflow's wait):")
    waits = [statistics.median(wait for _, wait in ends["nexusflow, quiet", turns]) for turns in lengths]
    print(f"  {'':16s}" + "".join(f"{wait:9.1f}" for wait in waits))


def main(options: argparse.Namespace) -> None:
    import anyio

    started = time.perf_counter()
    lengths = sorted(set(options.turns))
    print(f"run_end: turns {','.join(map(str, lengths))}, {options.repeats} repetition(s); load {load()}")
    with ExitStack() as stack:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        server = this_process_on_a_new_server("nexusflow-run-end-", stack)
        ends = anyio.run(bench, lengths, options.repeats, options.idle, server)
        report(ends, lengths, options.repeats)
    print(f"\ndone in {time.perf_counter() - started:.0f} s; load {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=lambda text: [int(n) for n in text.split(",")], default=[1, 40, 200])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--idle", type=float, default=2.0, help="seconds after each run for the server to record it")
    main(parser.parse_args())
