"""What each turn costs on Prefect: the floor, nexusflow and PrefectAgent side by side.

Three contenders do the same work, in one process, against one Prefect server:

- the floor: a bare Prefect flow (no nexusflow code) with a task per turn and a task per
  tool call, results persisted (JSON) under a positional cache key in Prefect's configured
  result storage: what Prefect itself costs for a durable agent loop. Its records go to the
  same folder as nexusflow's, through Prefect's plain ``LocalFileSystem`` (nexusflow's own
  block writes a temp file, fsyncs and renames: part of what nexusflow costs);
- nexusflow: ``create_in_process_client`` with an instant model and an instant tool;
- PrefectAgent: pydantic-ai's ``Agent`` with an instant ``FunctionModel`` and one tool,
  wrapped in ``PrefectAgent`` (its default task config: persisted results, its cache policy).

An N-turn run makes N model calls, each but the last calling the tool once (N - 1 tool
calls). For each run length (``--turns``, 1 included) the contenders run interleaved within a
repetition, in another order in the next (``--repeats``); each run is followed by ``--idle``
seconds and, when the server was started here, by as long as the server's CPU stays above
10 % (up to 60 s): it records a run's task runs after the run returns, and that backlog
would otherwise fall on the next run. Printed, medians over the repetitions:

- per extra turn, (X(N) - X(1)) / (N - 1) in each repetition, for X the run's wall time, the
  client process's CPU (``time.process_time`` around the run: every thread of this process)
  and, when the server was started here, the Prefect server's CPU (its process tree, from the
  run's start until it has gone quiet after it); the ratios ours / floor and theirs /
  floor; flatness, the per-extra-turn at the longest run over the one at 40 turns;
- the start of a run (call to first model call) and its end (last model call to the run's
  return: the last turn's task run, the flow's end and whatever the run publishes);
- the client's CPU after a run returned (background work the run left behind), and how
  long the server took to go quiet after the idle gap (its backlog);
- replay: a finished session run again with the same session id (every step ``Cached``),
  against the fresh run of the same length in the same repetition; for nexusflow and for
  the floor (a bare flow rerun with the same keys: what Prefect allows);
- ``import nexusflow.client`` against ``import prefect``, against ``from prefect import flow,
  task`` and against the floor's program up to its first run (those imports and its flow's
  definition), each in fresh subprocesses with bytecode cached for both sides.

The load average is printed at the start and the end.

    python benchmarks/loop_overhead.py                                  # 1,10,40,200 turns x 5
    python benchmarks/loop_overhead.py --turns 1,3 --repeats 1 --imports 1 --replay-turns 3
    python benchmarks/loop_overhead.py --skip prefectagent:200          # PrefectAgent is slow

Uses PREFECT_API_URL when set, else starts ``prefect server start`` on SQLite in a temp dir
(``_servers.py``; result storage in the same temp dir). Prefect's console log handler is set
to WARNING (``PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL``, unless set): INFO logs still go to
the API as in production, but the terminal is not flooded. One warm-up run of each contender
goes first (flow and task registration, the storage block), not counted. Needs the ``bench``
extra (pydantic-ai, for PrefectAgent).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import PrefectServer, base_env, this_process_on_a_new_server

CONTENDERS = ("floor", "nexusflow", "prefectagent")
LABELS = {"floor": "floor", "nexusflow": "nexusflow", "prefectagent": "PrefectAgent"}
ORDERS = [(0, 1, 2), (1, 2, 0), (2, 0, 1), (0, 2, 1), (2, 1, 0), (1, 0, 2)]
"""Contender orders, one per repetition: the three rotations, then those of the reverse, so
that every contender goes first, second and last as often as the others."""

SETTLE_MAX = 60.0
"""Seconds at most to wait, after a run and its idle gap, for the server to go quiet."""

RETRYABLE = frozenset({408, 423, 429, 500, 502, 503, 504})
RETRIED = [0]
"""Answers of the Prefect API with a retryable status (503 & co) so far: the client backs
off for seconds and tries again, which shows as an outlier run."""

MARKS: dict[str, float] = {}
"""perf_counter of the current run's first and last model call."""


def mark_model_call() -> None:
    now = time.perf_counter()
    MARKS.setdefault("first", now)
    MARKS["last"] = now


def count_retried() -> None:
    """Count the API's answers with a retryable status, on httpx's async client."""
    import httpx

    send = httpx.AsyncClient.send

    async def counted(client: Any, request: Any, **kwargs: Any) -> Any:
        response = await send(client, request, **kwargs)
        if response.status_code in RETRYABLE:
            RETRIED[0] += 1
        return response

    httpx.AsyncClient.send = counted  # type: ignore[method-assign, assignment]


def load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


# ---------------------------------------------------------------- the contenders


class Floor:
    """A bare Prefect flow: per turn a task that returns the model's reply, per tool call a
    task that returns the tool's result; persisted as JSON under a positional key (session,
    step, kind): a rerun with the same session id replays every step."""

    def __init__(self) -> None:
        from prefect import flow, get_run_logger, task

        def positional(context: Any, parameters: dict[str, Any]) -> str:
            return str(parameters["key"])

        options: dict[str, Any] = {"persist_result": True, "result_serializer": "json", "cache_key_fn": positional}

        @task(name="floor-turn", task_run_name="turn-{step}", **options)
        async def floor_turn(session_id: str, step: int, key: str, turns: int) -> dict[str, Any]:
            if step == turns - 1 and self.before_last is not None:
                await self.before_last()
            started = time.perf_counter()
            mark_model_call()
            if step < turns - 1:
                reply: dict[str, Any] = {"tool_calls": [{"name": "noop", "arguments": {"step": step}}]}
            else:
                reply = {"content": "done"}
            if self.logged:
                decided = f"calls: noop({{'step': {step}}})" if step < turns - 1 else "answer: done"
                get_run_logger().info("%s · seconds %.2f", decided, time.perf_counter() - started)
            return reply

        @task(name="floor-tool", task_run_name="tool-{step}-noop", **options)
        async def floor_tool(session_id: str, step: int, key: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = {"content": str(arguments["step"])}
            if self.logged:
                get_run_logger().info("arguments: %s · result: %s", arguments, result["content"])
            return result

        @flow(name="floor_run", flow_run_name="floor-{session_id}")
        async def floor_run(session_id: str, turns: int) -> dict[str, Any]:
            cached = 0
            for step in range(turns):
                key = f"{session_id}/{step}/turn"
                state = await floor_turn(session_id, step, key, turns, return_state=True)  # type: ignore[misc]
                reply = await state.aresult()
                cached += state.name == "Cached"
                calls = reply.get("tool_calls") or []
                if not calls:
                    return {"text": reply["content"], "cached": cached}
                for index, call in enumerate(calls):
                    key = f"{session_id}/{step}/tool/{index}"
                    arguments = call["arguments"]
                    state = await floor_tool(session_id, step, key, arguments, return_state=True)  # type: ignore[misc]
                    await state.aresult()
                    cached += state.name == "Cached"
            return {"text": None, "cached": cached}

        self.flow = floor_run
        self.last: dict[int, str] = {}
        self.before_last: Callable[[], Awaitable[None]] | None = None
        """Awaited in the last turn, before its model call is marked (``run_end.py``)."""
        self.logged = False
        """Whether a turn and a tool call each log a line, as nexusflow's do (``turn_costs.py``)."""

    def fresh(self, turns: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            session_id = f"floor-{uuid.uuid4().hex}"
            result = await self.flow(session_id=session_id, turns=turns)
            if result["text"] != "done" or result["cached"]:
                raise RuntimeError(f"floor: wrong result {result}")
            self.last[turns] = session_id

        return run

    def replay(self, turns: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            result = await self.flow(session_id=self.last[turns], turns=turns)
            if result["text"] != "done" or result["cached"] != 2 * turns - 1:
                raise RuntimeError(f"floor replay: not every step was Cached: {result}")

        return run


class Nexusflow:
    """``create_in_process_client`` with an instant async model (a tool call on every turn
    but the last) and an instant async tool (as the floor's tasks and PrefectAgent's model
    and tool: a sync one runs in a worker thread, a hop the floor does not make); one client
    (one ``agent_run`` flow) for every run length: the model reads the current length."""

    def __init__(self, toolkit: Any, longest: int) -> None:
        from nexusflow import ModelRequest, create_in_process_client

        target = self.target = {"turns": 1}

        async def generate(request: ModelRequest) -> Any:
            step = sum(m.role == "assistant" for m in request.messages)
            if step == target["turns"] - 1 and self.before_last is not None:
                await self.before_last()
            mark_model_call()
            if step < target["turns"] - 1:
                return {"tool_calls": [{"name": "noop", "arguments": {"step": step}}]}
            return "done"

        self.toolkit = toolkit
        self.client = create_in_process_client(generate, max_turns=longest)
        self.last: dict[int, str] = {}
        self.before_last: Callable[[], Awaitable[None]] | None = None
        """Awaited in the last turn, before its model call is marked (``run_end.py``)."""

    def fresh(self, turns: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            self.target["turns"] = turns
            session_id = f"bench-{uuid.uuid4().hex}"
            result = await self.client.run("bench", self.toolkit, session_id=session_id)
            if result.status != "completed" or result.text != "done" or result.metrics.turns != turns:
                raise RuntimeError(f"nexusflow: {result.status} after {result.metrics.turns} turns: {result.error}")
            if result.metrics.replayed_turns:
                raise RuntimeError("nexusflow: a fresh run replayed steps")
            self.last[turns] = session_id

        return run

    def replay(self, turns: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            self.target["turns"] = turns
            result = await self.client.run("bench", self.toolkit, session_id=self.last[turns])
            metrics = result.metrics
            if result.status != "completed" or result.text != "done":
                raise RuntimeError(f"nexusflow replay: {result.status}: {result.error}")
            if metrics.replayed_turns != turns or metrics.replayed_tool_calls != turns - 1:
                raise RuntimeError(
                    f"nexusflow replay: {metrics.replayed_turns} of {turns} turns and"
                    f" {metrics.replayed_tool_calls} of {turns - 1} tool calls replayed"
                )

        return run


class Theirs:
    """pydantic-ai's PrefectAgent (``_prefect_agent.py``): one agent for every run length."""

    def __init__(self) -> None:
        from _prefect_agent import runner

        self.run = runner("bench", mark_model_call)

    def fresh(self, turns: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            await self.run(turns)

        return run


# ---------------------------------------------------------------- measuring


@dataclass
class Sample:
    wall: float
    cpu: float
    idle_cpu: float
    server_cpu: float | None
    start: float | None
    end: float | None
    retried: int
    """The API's answers with a retryable status during the run."""
    settle: float
    """Seconds after the idle gap until the server's CPU fell under 10 % (its backlog)."""

    def line(self) -> str:
        server = f", server CPU {self.server_cpu * 1000:.0f} ms" if self.server_cpu is not None else ""
        return (
            f"wall {self.wall * 1000:.0f} ms, CPU {self.cpu * 1000:.0f} ms{server}, settle {self.settle:.1f} s,"
            f" {self.retried} x 503 & co; load {load()}"
        )


@dataclass
class Results:
    samples: dict[tuple[str, int], list[Sample | None]] = field(default_factory=dict)
    """(contender, turns) -> one sample per repetition (None: that run failed)."""
    replays: dict[str, list[tuple[Sample, Sample]]] = field(default_factory=dict)
    """contender -> (fresh, replay) per repetition."""
    failures: list[str] = field(default_factory=list)


async def measure(run: Callable[[], Awaitable[None]], idle: float, server: PrefectServer | None) -> Sample:
    import anyio

    MARKS.clear()
    server_before = server.cpu()[0] if server is not None else 0.0
    retried = RETRIED[0]
    cpu = time.process_time()
    started = time.perf_counter()
    await run()
    ended = time.perf_counter()
    cpu_run = time.process_time() - cpu
    await anyio.sleep(idle)
    settle = await server.quiet(SETTLE_MAX) if server is not None else 0.0
    idle_cpu = time.process_time() - cpu - cpu_run
    server_cpu = server.cpu()[0] - server_before if server is not None else None
    first, last = MARKS.get("first"), MARKS.get("last")
    return Sample(
        wall=ended - started,
        cpu=cpu_run,
        idle_cpu=idle_cpu,
        server_cpu=server_cpu,
        start=first - started if first is not None else None,
        end=ended - last if last is not None else None,
        retried=RETRIED[0] - retried,
        settle=settle,
    )


async def bench(options: argparse.Namespace, server: PrefectServer | None) -> Results:
    from nexusflow import Toolkit, tool

    count_retried()

    @tool
    async def noop(step: int) -> int:
        """Returns its argument. Async, as the floor's tool task and PrefectAgent's tool are: a
        sync tool runs in a worker thread, a hop the other two would not pay."""
        return step

    lengths: list[int] = options.turns
    results = Results()
    async with await Toolkit.load(tools=[noop]) as toolkit:
        made: dict[str, Callable[[], Any]] = {  # only those asked for: CI's has no pydantic-ai
            "floor": Floor,
            "nexusflow": lambda: Nexusflow(toolkit, max(*lengths, options.replay_turns, 2)),
            "prefectagent": Theirs,
        }
        contenders = {name: made[name]() for name in options.contenders}
        started = time.perf_counter()
        for contender in contenders.values():  # not counted
            await contender.fresh(2)()
        print(f"warm-up: {time.perf_counter() - started:.1f} s; load {load()}", flush=True)
        for rep in range(options.repeats):
            rep_started = time.perf_counter()
            order = [CONTENDERS[i] for i in ORDERS[rep % len(ORDERS)] if CONTENDERS[i] in contenders]
            for turns in lengths if rep % 2 == 0 else lengths[::-1]:
                for name in order:
                    if (name, turns) in options.skip:
                        continue
                    runs = results.samples.setdefault((name, turns), [])
                    try:
                        runs.append(sample := await measure(contenders[name].fresh(turns), options.idle, server))
                        if options.verbose:
                            print(f"  rep {rep + 1} {LABELS[name]:12s} {turns:4d} turns: {sample.line()}", flush=True)
                    except Exception as exc:
                        runs.append(None)
                        results.failures.append(f"rep {rep + 1}, {LABELS[name]}, {turns} turns: {exc!r}"[:500])
            if options.replay_turns:
                turns = options.replay_turns
                for name in [name for name in order if name in ("floor", "nexusflow")]:
                    measured = results.samples.get((name, turns), [])
                    try:
                        fresh = measured[-1] if turns in lengths and measured else None
                        if fresh is None:  # not among --turns (or it failed): a fresh run, not counted there
                            fresh = await measure(contenders[name].fresh(turns), options.idle, server)
                        replay = await measure(contenders[name].replay(turns), options.idle, server)
                        if options.verbose:
                            print(f"  rep {rep + 1} {LABELS[name]:12s} {turns:4d} turns, replay: {replay.line()}")
                    except Exception as exc:
                        results.failures.append(f"rep {rep + 1}, {LABELS[name]} replay: {exc!r}"[:500])
                    else:
                        results.replays.setdefault(name, []).append((fresh, replay))
            print(
                f"rep {rep + 1} of {options.repeats} ({', '.join(LABELS[name] for name in order)}):"
                f" {time.perf_counter() - rep_started:.0f} s; load {load()}",
                flush=True,
            )
    await drain()
    return results


async def drain() -> None:
    """Send the logs, events and lock deletes still queued while the server is up (else the
    process would retry sending them to the stopped server at exit, for a minute)."""
    import anyio.to_thread
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    from nexusflow._prefect.let_go import drain as let_go

    await anyio.to_thread.run_sync(let_go)  # the session locks' deletes left to after their runs
    for service in (APILogWorker, EventsWorker):
        pending: Any = service.drain_all(timeout=30)
        if pending is not None and hasattr(pending, "__await__"):
            await pending


# ---------------------------------------------------------------- imports


FLOOR_PROGRAM = """\
from typing import Any
from prefect import flow, task
options: dict[str, Any] = {"persist_result": True, "result_serializer": "json"}
@task(name="floor-turn", task_run_name="turn-{step}", **options)
async def floor_turn(session_id: str, step: int, key: str, turns: int) -> dict[str, Any]: ...
@task(name="floor-tool", task_run_name="tool-{step}-noop", **options)
async def floor_tool(session_id: str, step: int, key: str, arguments: dict[str, Any]) -> dict[str, Any]: ...
@flow(name="floor_run", flow_run_name="floor-{session_id}")
async def floor_run(session_id: str, turns: int) -> dict[str, Any]: ..."""
"""``Floor``'s definitions, up to its first run."""

IMPORTS = {
    "prefect": "import prefect",
    "flow": "from prefect import flow, task",
    "floor": FLOOR_PROGRAM,
    "ours": "import nexusflow.client",
}
"""What is timed: Prefect's package (its root imports ``flow`` and ``task`` lazily), what a
program needs to define a flow (``from prefect import flow, task``), the floor's program up to
its first run (``FLOOR_PROGRAM``: Prefect builds a flow's parameter schema at its definition,
importing ``pydantic.v1`` to look for v1 models), and ours."""


def import_times(count: int) -> dict[str, list[float]]:
    """Seconds of each statement in ``IMPORTS`` in fresh interpreters, in a rotating order;
    one warm-up round first.

    Bytecode is cached for both sides, as after an install (pip compiles what it installs;
    an editable checkout compiles on first import): a ``PYTHONPYCACHEPREFIX`` in a temp dir
    that the warm-up fills, whatever ``PYTHONDONTWRITEBYTECODE`` says. Without it our
    modules, unlike Prefect's, would be compiled from source in every interpreter (~35 ms)."""
    env = base_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    names = list(IMPORTS)
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="nexusflow-pycache-") as cache:
        env["PYTHONPYCACHEPREFIX"] = cache
        for index in range(count + 1):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                code = f"import time\nt = time.perf_counter()\n{IMPORTS[name]}\nprint(time.perf_counter() - t)"
                run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
                if index:
                    times[name].append(float(run.stdout.strip().splitlines()[-1]))
    return times


# ---------------------------------------------------------------- the report


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ms(value: float | None, width: int = 8) -> str:
    return f"{value * 1000:{width}.1f}" if value is not None else f"{'-':>{width}s}"


def _ratio(value: float | None, base: float | None) -> str:
    return f"({value / base:5.2f}x)" if value is not None and base is not None and base > 0 else f"{'':8s}"


def per_extra_turn(results: Results, name: str, turns: int, metric: Callable[[Sample], float | None]) -> float | None:
    """Median over the repetitions of (X(N) - X(1)) / (N - 1)."""
    values = []
    for long, short in zip(results.samples.get((name, turns), []), results.samples.get((name, 1), []), strict=False):
        if long is None or short is None:
            continue
        x_long, x_short = metric(long), metric(short)
        if x_long is not None and x_short is not None:
            values.append((x_long - x_short) / (turns - 1))
    return _median(values)


METRICS: dict[str, Callable[[Sample], float | None]] = {
    "wall": lambda s: s.wall,
    "client CPU": lambda s: s.cpu,
    "server CPU": lambda s: s.server_cpu,
}


def report(results: Results, options: argparse.Namespace, server: PrefectServer | None) -> None:
    names = [name for name in CONTENDERS if name in options.contenders]
    longer = [turns for turns in options.turns if turns > 1]
    print(f"\n== per extra turn (a turn task + a tool task), ms, 1 -> N turns; median of {options.repeats} rep(s)")
    # a column per contender (13 wide), and after ours and theirs their ratio to the floor (9)
    head = "".join(f"{LABELS[n]:>13s}" + ("" if n == "floor" else f"{'x floor':>9s}") for n in names)
    metrics = {key: value for key, value in METRICS.items() if server is not None or key != "server CPU"}
    for what, metric in metrics.items():
        print(f"  {what:12s} {'N':>4s}{head}")
        extra: dict[tuple[str, int], float | None] = {}
        for turns in longer:
            cells = []
            for name in names:
                extra[name, turns] = value = per_extra_turn(results, name, turns, metric)
                ratio = "" if name == "floor" else f" {_ratio(value, extra.get(('floor', turns)))}"
                cells.append(_ms(value, 13) + ratio)
            print(f"  {'':12s} {turns:4d}{''.join(cells)}")
        if 40 in longer and max(longer) > 40:
            top = max(longer)
            cells = []
            for name in names:
                at_top, at_40 = extra.get((name, top)), extra.get((name, 40))
                flat = f"{at_top / at_40:12.2f}x" if at_top is not None and at_40 else f"{'-':>13s}"
                cells.append(flat + ("" if name == "floor" else f"{'':9s}"))
            print(f"  {'flatness':12s} {f'{top}/40':>4s}{''.join(cells)}  (per extra turn at {top} / at 40)")

    print(
        "\n== whole run, ms (median): wall, client CPU, start (call -> 1st model call),"
        " end (last model call -> return), idle CPU"
    )
    print(
        f"  {'':14s} {'N':>4s} {'wall':>10s} {'CPU':>10s} {'start':>10s} {'end':>10s} {'idle CPU':>10s}"
        f" {'settle':>10s} {'503 & co':>9s}"
    )
    for name in names:
        for turns in options.turns:
            runs = [s for s in results.samples.get((name, turns), []) if s is not None]
            if not runs:
                continue

            def med(metric: Callable[[Sample], float | None], runs: list[Sample] = runs) -> float | None:
                return _median([v for v in map(metric, runs) if v is not None])

            values = [med(lambda s: s.wall), med(lambda s: s.cpu), med(lambda s: s.start)]
            values += [med(lambda s: s.end), med(lambda s: s.idle_cpu), med(lambda s: s.settle)]
            retried = sum(s.retried for s in runs)
            print(f"  {LABELS[name]:14s} {turns:4d} " + " ".join(_ms(v, 10) for v in values) + f" {retried:9d}")
    print("  (idle CPU: this process's CPU after the run returned, until the next: background work left behind;")
    print("   settle: time after the idle gap until the server's CPU fell under 10 %: its backlog from the run;")
    print("   503 & co: the API's answers with a retryable status, summed over the repetitions)")

    if results.replays:
        turns = options.replay_turns
        print(f"\n== replay: a finished {turns}-turn session run again with the same session id (every step Cached)")
        print(
            f"  {'':14s} {'fresh wall':>11s} {'replay wall':>12s} {'ratio':>7s}"
            f" {'fresh CPU':>10s} {'replay CPU':>11s} {'ratio':>7s}"
        )
        for name in [n for n in names if n in results.replays]:
            pairs = results.replays[name]
            fresh_wall = _median([f.wall for f, _ in pairs])
            replay_wall = _median([r.wall for _, r in pairs])
            wall_ratio = _median([r.wall / f.wall for f, r in pairs])
            fresh_cpu = _median([f.cpu for f, _ in pairs])
            replay_cpu = _median([r.cpu for _, r in pairs])
            cpu_ratio = _median([r.cpu / f.cpu for f, r in pairs])
            print(
                f"  {LABELS[name]:14s} {_ms(fresh_wall, 11)} {_ms(replay_wall, 12)} {wall_ratio:6.2f}x"
                f" {_ms(fresh_cpu, 10)} {_ms(replay_cpu, 11)} {cpu_ratio:6.2f}x"
            )
        print("  (ratios: median over the repetitions of replay / the same repetition's fresh run)")

    for failure in results.failures:
        print(f"!! failed: {failure}")


def print_imports(times: dict[str, list[float]]) -> None:
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"== import, fresh interpreter, bytecode cached, median of {len(times['prefect'])}:", flush=True)
    for name, statement in IMPORTS.items():
        label = "the floor's flow definition" if name == "floor" else statement
        print(
            f"  {label:32s} {medians[name]:5.2f} s  {medians[name] / medians['prefect']:5.2f}x import prefect"
            f"  {medians[name] / medians['floor']:5.2f}x the floor's  ({', '.join(f'{t:.2f}' for t in times[name])})",
            flush=True,
        )


def main(options: argparse.Namespace) -> None:
    import anyio

    started = time.perf_counter()
    print(
        f"loop_overhead: turns {','.join(map(str, options.turns))}, {options.repeats} repetition(s),"
        f" idle {options.idle:g} s, contenders {', '.join(LABELS[n] for n in options.contenders)}"
        + (f", skipping {', '.join(f'{LABELS[n]} at {t}' for n, t in sorted(options.skip))}" if options.skip else "")
        + f"; {os.cpu_count()} cores, load {load()}",
        flush=True,
    )
    if options.imports:
        print_imports(import_times(options.imports))
    with ExitStack() as stack:
        server = None
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        if os.environ.get("PREFECT_API_URL"):
            print(f"server: PREFECT_API_URL={os.environ['PREFECT_API_URL']}", flush=True)
        else:
            server = this_process_on_a_new_server("nexusflow-loop-overhead-", stack)
            print(f"server: prefect server start on SQLite, up in {server.started_in:.1f} s; load {load()}", flush=True)
        results = anyio.run(bench, options, server)
        report(results, options, server)
    print(f"\ndone in {time.perf_counter() - started:.0f} s; load {load()}")


def _skips(text: str) -> set[tuple[str, int]]:
    skips = set()
    for item in filter(None, text.split(",")):
        name, _, turns = item.partition(":")
        if name not in CONTENDERS:
            raise argparse.ArgumentTypeError(f"unknown contender {name!r}: one of {', '.join(CONTENDERS)}")
        skips.add((name, int(turns)))
    return skips


def _lengths(text: str) -> list[int]:
    lengths = sorted({int(item) for item in text.split(",")} | {1})
    if lengths[0] < 1:
        raise argparse.ArgumentTypeError("run lengths are at least 1 turn")
    return lengths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=_lengths, default=[1, 10, 40, 200], help="run lengths (1 is always added)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--idle", type=float, default=2.0, help="seconds after each run for the server to record it")
    parser.add_argument(
        "--contenders",
        type=lambda text: [name for name in CONTENDERS if name in text.split(",")],
        default=list(CONTENDERS),
        help="floor,nexusflow,prefectagent",
    )
    parser.add_argument("--skip", type=_skips, default=set(), help="contender:turns,... not run (prefectagent:200)")
    parser.add_argument("--replay-turns", type=int, default=40, help="length of the replayed session (0: no replay)")
    parser.add_argument("--verbose", action="store_true", help="a line per run as it ends")
    parser.add_argument("--imports", type=int, default=5, help="fresh interpreters per import measured (0: skip)")
    main(parser.parse_args())
