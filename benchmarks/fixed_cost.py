"""What a run pays once: nexusflow, the floor and pydantic-ai side by side, on one server.

Four contenders do the same 2-turn run (one model call that calls one instant tool, then one
that answers), in one process, against one ``prefect server start`` (SQLite or PostgreSQL,
``--server``; ``_servers.py``):

- the floor: a bare Prefect flow, a task per turn and per tool call (``loop_overhead.py``);
- nexusflow: ``create_in_process_client`` with an instant model and an instant tool;
- PrefectDurability: pydantic-ai's current Prefect integration, an ``Agent`` with the
  capability, run inside a flow (``_prefect_durability.py``);
- PrefectAgent: pydantic-ai's deprecated wrapper (``_prefect_agent.py``), while it exists;
- on request (``--contenders``), what a guarantee costs: ``no-lease``, nexusflow without its
  session lease (no lock, no heartbeat), and ``no-artifacts``, without its transcript and
  summary artifacts (both made by patching this process, never the library).

Each repetition (``--repeats``) measures, the contenders interleaved in a rotating order:

1. one 2-turn run: wall time, the client's CPU (this process, every thread), the Prefect
   server's CPU, the end of the run (last model call to return), then ``--idle`` seconds and
   as long as the server stays busy (its backlog falls on nobody else);
2. ``--gathered`` runs at once in one process (an anyio task group): wall and CPU.

Every Prefect API request this process sends (httpx's async and sync clients) is counted
from a run's start until the server went quiet after it, by method and path template (ids
blanked): requests per 2-turn run, broken down by purpose. Task runs travel as events over
a websocket and are not requests; logs go in batches (``POST /logs/``), whichever run's
window they fall in. Printed: medians, ratios against PrefectDurability and the floor
measured in the same run, and the load average at the start, after each repetition and at
the end.

    python benchmarks/fixed_cost.py                         # SQLite, 5 repetitions, 20 gathered
    python benchmarks/fixed_cost.py --server postgres
    python benchmarks/fixed_cost.py --repeats 1 --gathered 5 --contenders nexusflow,durability
    python benchmarks/fixed_cost.py --contenders floor,nexusflow,durability,no-lease,no-artifacts

Needs the ``bench`` extra (pydantic-ai); PostgreSQL needs its binaries (as the tests do).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import PrefectServer, this_process_on_a_new_server
from loop_overhead import RETRIED, Floor, Nexusflow, Theirs, drain, load, mark_model_call, measure

CONTENDERS = ("floor", "nexusflow", "durability", "prefectagent", "no-lease", "no-artifacts")
DEFAULT = CONTENDERS[:4]
LABELS = {
    "floor": "floor",
    "nexusflow": "nexusflow",
    "durability": "PrefectDurability",
    "prefectagent": "PrefectAgent",
    "no-lease": "nexusflow -lease",
    "no-artifacts": "nexusflow -artifacts",
}
TURNS = 2
RETRYABLE = frozenset({408, 423, 429, 500, 502, 503, 504})
REQUESTS: Counter[str] = Counter()
"""Every Prefect API request of this process so far, by method and path template."""


def _template(request: Any) -> str:
    path = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", request.url.path)
    path = re.sub(r"nexusflow-session-[0-9a-f]+", "nexusflow-session-<digest>", path)
    path = re.sub(r"^/api", "", path)
    return f"{request.method} {path}"


def count_requests() -> None:
    """Count every request of httpx's async and sync clients (Prefect's API), and the
    answers with a retryable status (``loop_overhead.RETRIED``)."""
    import httpx

    async_send, sync_send = httpx.AsyncClient.send, httpx.Client.send

    async def counted(client: Any, request: Any, **kwargs: Any) -> Any:
        REQUESTS[_template(request)] += 1
        response = await async_send(client, request, **kwargs)
        RETRIED[0] += response.status_code in RETRYABLE
        return response

    def counted_sync(client: Any, request: Any, **kwargs: Any) -> Any:
        REQUESTS["(sync) " + _template(request)] += 1
        response = sync_send(client, request, **kwargs)
        RETRIED[0] += response.status_code in RETRYABLE
        return response

    httpx.AsyncClient.send = counted  # type: ignore[method-assign, assignment]
    httpx.Client.send = counted_sync  # type: ignore[method-assign, assignment]


class Without:
    """nexusflow with one guarantee turned off, to measure what it costs (made by patching
    this process for its runs: a benchmark's means, never the library's): ``no-lease``, no
    session lease (no lock created and deleted, no heartbeat); ``no-artifacts``, no transcript
    and summary artifacts."""

    def __init__(self, ours: Nexusflow, what: str) -> None:
        self.ours = ours
        self.what = what
        self.running = 0
        """Its runs under way: gathered runs patch once, and the last one out restores."""
        self.saved: Any = None

    @contextmanager
    def patched(self) -> Iterator[None]:
        agent = sys.modules["nexusflow.flows.run"]
        attribute = "session_lease" if self.what == "no-lease" else "publish"
        if not self.running:
            self.saved = getattr(agent, attribute)
            setattr(agent, attribute, _no_lease if self.what == "no-lease" else _no_artifacts)
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            if not self.running:
                setattr(agent, attribute, self.saved)

    def fresh(self, turns: int) -> Callable[[], Awaitable[None]]:
        run = self.ours.fresh(turns)

        async def patched_run() -> None:
            with self.patched():
                await run()

        return patched_run


class _Unchecked:
    async def check(self) -> None:
        return None


@asynccontextmanager
async def _no_lease(session_id: str, flow_run_id: str) -> AsyncIterator[_Unchecked]:
    yield _Unchecked()


async def _no_artifacts(result: Any, entries: Any) -> None:
    return None


class Durability:
    """pydantic-ai's PrefectDurability (``_prefect_durability.py``)."""

    def __init__(self) -> None:
        from _prefect_durability import runner

        self.run = runner("bench", mark_model_call)

    def fresh(self, turns: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            await self.run(turns)

        return run


@dataclass
class Row:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    end: list[float] = field(default_factory=list)
    gathered: list[float] = field(default_factory=list)
    gathered_cpu: list[float] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    runs_counted: int = 0
    retried: int = 0
    failures: list[str] = field(default_factory=list)


async def gather(run: Callable[[], Awaitable[None]], count: int, failures: list[str]) -> tuple[float, float]:
    """``count`` runs at once: wall and client CPU, seconds."""
    import anyio

    async def one() -> None:
        try:
            await run()
        except Exception as exc:
            failures.append(f"gathered: {exc!r}"[:300])

    cpu, started = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(count):
            group.start_soon(one)
    return time.perf_counter() - started, time.process_time() - cpu


async def bench(options: argparse.Namespace, server: PrefectServer) -> dict[str, Row]:
    import anyio

    from nexusflow import Toolkit, tool

    count_requests()

    @tool
    async def noop(step: int) -> int:
        """Returns its argument (async, as the others' tools are)."""
        return step

    rows = {name: Row() for name in options.contenders}
    async with await Toolkit.load(tools=[noop]) as toolkit:
        makers: dict[str, Callable[[], Any]] = {
            "floor": Floor,
            "nexusflow": lambda: Nexusflow(toolkit, TURNS),
            "durability": Durability,
            "prefectagent": Theirs,
        }
        contenders = {name: makers[name]() for name in options.contenders if name in makers}
        for name in options.contenders:
            if name not in makers:  # one nexusflow client, a guarantee turned off
                contenders[name] = Without(contenders.get("nexusflow") or Nexusflow(toolkit, TURNS), name)
        started = time.perf_counter()
        for contender in contenders.values():  # flow and task registration, storage: not counted
            await contender.fresh(TURNS)()
        await server.quiet(60)
        print(f"warm-up: {time.perf_counter() - started:.1f} s; load {load()}", flush=True)
        names = list(contenders)
        for rep in range(options.repeats):
            shift = rep % len(names)
            order = names[shift:] + names[:shift]
            if rep % 2:
                order.reverse()
            for name in order:
                row, run = rows[name], contenders[name].fresh(TURNS)
                before, retried = REQUESTS.copy(), RETRIED[0]
                try:
                    sample = await measure(run, options.idle, server)
                except Exception as exc:
                    row.failures.append(f"rep {rep + 1}: {exc!r}"[:300])
                    continue
                row.requests.update(REQUESTS - before)
                row.runs_counted += 1
                row.retried += RETRIED[0] - retried
                row.wall.append(sample.wall)
                row.cpu.append(sample.cpu)
                row.server_cpu.append(sample.server_cpu or 0.0)
                if sample.end is not None:
                    row.end.append(sample.end)
            for name in order if options.gathered else ():
                row = rows[name]
                wall, cpu = await gather(contenders[name].fresh(TURNS), options.gathered, row.failures)
                row.gathered.append(wall)
                row.gathered_cpu.append(cpu)
                await anyio.sleep(options.idle)
                await server.quiet(120)
            print(
                f"rep {rep + 1} of {options.repeats} ({', '.join(LABELS[n] for n in order)}); load {load()}", flush=True
            )
    await drain()
    return rows


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ms(value: float | None, width: int = 9) -> str:
    return f"{value * 1000:{width}.0f}" if value is not None else f"{'-':>{width}s}"


def _ratio(value: float | None, base: float | None, width: int = 7) -> str:
    return f"{value / base:{width - 1}.2f}x" if value is not None and base else f"{'-':>{width}s}"


def report(rows: dict[str, Row], options: argparse.Namespace) -> None:
    base = "durability" if "durability" in rows else next(iter(rows))
    print(
        f"\n== one {TURNS}-turn run and {options.gathered} gathered, {options.server}; medians of"
        f" {options.repeats} repetition(s); ratios against {LABELS[base]} and the floor, same run"
    )
    head = ("run ms", "x base", "CPU ms", "srv CPU", "end ms", "x floor", "gathered s", "x base", "CPU s", "requests")
    print(f"  {'':18s}" + "".join(f"{h:>10s}" for h in head))
    medians = {
        name: {
            "wall": _median(row.wall),
            "end": _median(row.end),
            "gathered": _median(row.gathered),
        }
        for name, row in rows.items()
    }
    floor_end = medians.get("floor", {}).get("end")
    for name, row in rows.items():
        mine = medians[name]
        requests = sum(row.requests.values()) / row.runs_counted if row.runs_counted else None
        cells = [
            _ms(mine["wall"], 10),
            _ratio(mine["wall"], medians[base]["wall"], 10),
            _ms(_median(row.cpu), 10),
            _ms(_median(row.server_cpu), 10),
            _ms(mine["end"], 10),
            _ratio(mine["end"], floor_end, 10),
            f"{mine['gathered']:10.2f}" if mine["gathered"] is not None else f"{'-':>10s}",
            _ratio(mine["gathered"], medians[base]["gathered"], 10),
            f"{_median(row.gathered_cpu):10.2f}" if row.gathered_cpu else f"{'-':>10s}",
            f"{requests:10.1f}" if requests is not None else f"{'-':>10s}",
        ]
        print(f"  {LABELS[name]:18s}" + "".join(cells))
    print(
        "  (run: call to return; CPU: this process; srv CPU: the Prefect server's process tree until it went"
        " quiet; end: last model call to return; gathered: wall of all at once, CPU of this process)"
    )
    for name, row in rows.items():
        if row.retried or row.failures:
            print(f"  {LABELS[name]}: {row.retried} answers 503 & co; {len(row.failures)} failed")
            for failure in row.failures[:3]:
                print(f"    {failure}")
    print(f"\n== Prefect API requests per {TURNS}-turn run, by purpose (mean of {options.repeats} run(s))")
    kinds = sorted({kind for row in rows.values() for kind in row.requests})
    print(f"  {'':56s}" + "".join(f"{LABELS[name][:14]:>15s}" for name in rows))
    for kind in sorted(kinds, key=lambda k: (-sum(row.requests[k] for row in rows.values()), k)):
        cells = "".join(
            f"{row.requests[kind] / row.runs_counted:15.1f}"
            if row.runs_counted and row.requests[kind]
            else f"{'':>15s}"
            for row in rows.values()
        )
        print(f"  {kind[:56]:56s}{cells}")
    totals = "".join(
        f"{sum(row.requests.values()) / row.runs_counted:15.1f}" if row.runs_counted else f"{'-':>15s}"
        for row in rows.values()
    )
    print(f"  {'total':56s}{totals}")


def main(options: argparse.Namespace) -> None:
    import anyio

    started = time.perf_counter()
    print(
        f"fixed_cost: {TURNS}-turn runs on {options.server}, {options.repeats} repetition(s), {options.gathered}"
        f" gathered, idle {options.idle:g} s, contenders {', '.join(LABELS[n] for n in options.contenders)};"
        f" {os.cpu_count()} cores, load {load()}",
        flush=True,
    )
    with ExitStack() as stack:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        server = this_process_on_a_new_server("nexusflow-fixed-cost-", stack, options.server)
        print(f"server up in {server.started_in:.1f} s; load {load()}", flush=True)
        rows = anyio.run(bench, options, server)
        report(rows, options)
    print(f"\ndone in {time.perf_counter() - started:.0f} s; load {load()}")


def _contenders(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in CONTENDERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown contender(s) {', '.join(unknown)}; known: {', '.join(CONTENDERS)}")
    return [name for name in CONTENDERS if name in names]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gathered", type=int, default=20, help="runs at once in one process (0: skip)")
    parser.add_argument("--idle", type=float, default=2.5, help="seconds after each run (logs go every 2 s)")
    parser.add_argument(
        "--contenders", type=_contenders, default=list(DEFAULT), help=f"{','.join(CONTENDERS)} (default: the first 4)"
    )
    main(parser.parse_args())
