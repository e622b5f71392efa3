"""Throughput against a real Prefect server: several client processes, and many runs in one.

Both backends' servers (a ``prefect server start`` on SQLite, and one on PostgreSQL, started
here on free loopback ports with temp homes) and their workers start first; then each
repetition goes round the backends (the order alternating, so that a change of the machine's
load falls on both), and on each:

1. ``--processes`` worker processes each do ``--runs`` nexusflow runs one after another, all
   at once (``--processes-baseline``: PrefectAgent's too, interleaved);
2. ``--gathered`` runs gathered in one process (an anyio task group), nexusflow and
   pydantic-ai's ``PrefectAgent`` in turn (the order alternating), on the same server.

Each prints runs/min, p50/p95 run time, errors (count and the first message of each kind),
the client's CPU and the server's (the Prefect server's process tree, and PostgreSQL's), the
API requests per run by kind, and for the gathered runs the ratio nexusflow / PrefectAgent;
the machine's load average at the start and end of every measurement; a summary at the end.

The workload: ``--turns`` turns a run (3), each but the last calling one tool (2 tool calls),
an instant in-process scripted model and an instant async tool. Every run's answer is
checked; a wrong one is an error. Errors also count the answers with a retryable status (503
& co, counted on the client's HTTP transport): a run survives them (Prefect's client retries
after 2, 4, 8 ... s) but pays for them.

    python benchmarks/throughput.py                      # 4 x 20, gathered 20, 3 reps, both: ~12 min
    python benchmarks/throughput.py --processes 2 --runs 3 --gathered 3 --repeats 1   # ~1 min

``--profile DIR`` adds one more gathered nexusflow measurement per backend, not counted,
under ``py-spy record`` of the client and of the Prefect server (raw collapsed stacks in DIR).
Workers are this file run with ``--worker``: separate processes sharing nothing but the
server (and, as on one machine, the local result storage folder). Needs the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import PrefectServer, base_env, prefect_server, stop

MARK = "@@throughput "
FRAMEWORKS = {"nexusflow": "nexusflow", "prefectagent": "PrefectAgent"}


# ---------------------------------------------------------------- worker mode


RETRYABLE = frozenset({408, 423, 429, 500, 502, 503, 504})


class Requests:
    """Every HTTP request this process sends through httpx's async client (Prefect's API):
    counted by method and path (ids blanked), and each answer with a retryable status (503
    ...) kept as an error: a run survives those (Prefect's client retries after 2, 4, 8 s),
    but pays. Task runs travel as events over a websocket: not counted here."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.retried: list[str] = []

    def install(self) -> None:
        import httpx

        send = httpx.AsyncClient.send
        counter = self

        async def counted(client: Any, request: Any, **kwargs: Any) -> Any:
            path = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|nexusflow-session-[0-9a-f]+", "<id>", request.url.path)
            counter.count[f"{request.method} {path}"] += 1
            response = await send(client, request, **kwargs)
            if response.status_code in RETRYABLE:
                await response.aread()
                counter.retried.append(f"HTTP {response.status_code} {request.method} {path}: {response.text[:200]}")
            return response

        httpx.AsyncClient.send = counted  # type: ignore[assignment]


def _kind(message: str) -> str:
    """An error's kind: its first line with ids and numbers blanked, cut short."""
    first = (message.strip().splitlines() or [""])[0]
    first = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<id>", first)
    first = re.sub(r"\d+(\.\d+)?", "N", first)
    return first[:90]


class Workloads:
    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.nexusflow: Any = None
        self.toolkit: Any = None
        self.prefect_agent: Any = None

    async def start(self, frameworks: list[str]) -> None:
        if "nexusflow" in frameworks:
            from nexusflow import ModelRequest, Toolkit, create_in_process_client

            turns = self.turns

            def generate(request: ModelRequest) -> Any:
                step = sum(m.role == "assistant" for m in request.messages)
                if step < turns - 1:
                    return {"tool_calls": [{"name": "noop", "arguments": {"step": step}}]}
                return "done"

            async def noop(step: int) -> int:
                """Returns its argument."""
                return step

            self.toolkit = await Toolkit.load(tools=[noop])
            self.nexusflow = create_in_process_client(generate, max_turns=turns)
        if "prefectagent" in frameworks:
            from pydantic_ai import Agent
            from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
            from pydantic_ai.models.function import AgentInfo, FunctionModel

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # PrefectAgent is deprecated for PrefectDurability
                from pydantic_ai.durable_exec.prefect import PrefectAgent

            turns = self.turns

            def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
                step = sum(isinstance(m, ModelResponse) for m in messages)
                if step < turns - 1:
                    return ModelResponse(parts=[ToolCallPart("noop", {"step": step})])
                return ModelResponse(parts=[TextPart("done")])

            agent = Agent(FunctionModel(respond), name="bench")

            @agent.tool_plain(name="noop")
            async def echo(step: int) -> int:
                """Returns its argument."""
                return step

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.prefect_agent = PrefectAgent(agent)

    async def one(self, framework: str) -> None:
        """One run; raises if it failed or answered wrong."""
        if framework == "nexusflow":
            result = await self.nexusflow.run("bench", self.toolkit, session_id=f"bench-{uuid.uuid4().hex}")
            if result.status != "completed":
                raise RuntimeError(f"run {result.status}: {result.error}")
            if result.text != "done" or result.metrics.turns != self.turns:
                raise RuntimeError(f"wrong result: {result.text!r} after {result.metrics.turns} turns")
        else:
            result = await self.prefect_agent.run("bench")
            if result.output != "done":
                raise RuntimeError(f"wrong result: {result.output!r}")


async def _measure(work: Workloads, framework: str, runs: int, gathered: bool, requests: Requests) -> dict[str, Any]:
    import anyio

    times: list[float] = []
    errors: list[str] = []

    async def timed() -> None:
        started = time.perf_counter()
        try:
            await work.one(framework)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        else:
            times.append(time.perf_counter() - started)

    requests.count.clear()
    requests.retried.clear()
    cpu, started = time.process_time(), time.time()
    if gathered:
        async with anyio.create_task_group() as group:
            for _ in range(runs):
                group.start_soon(timed)
    else:
        for _ in range(runs):
            await timed()
    return {
        "start": started,
        "end": time.time(),
        "cpu": time.process_time() - cpu,
        "times": times,
        "errors": errors,
        "retried": list(requests.retried),
        "requests": dict(requests.count),
    }


def _reply(payload: dict[str, Any]) -> None:
    print(MARK + json.dumps(payload), flush=True)


async def worker(frameworks: list[str], turns: int) -> None:
    import anyio

    requests = Requests()
    requests.install()
    work = Workloads(turns)
    await work.start(frameworks)
    for framework in frameworks:  # warm-up: connections, flow and task registration
        await work.one(framework)
    _reply({"ready": os.getpid()})
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if not line or line.strip() == "quit":
            break
        command = json.loads(line)
        _reply(await _measure(work, command["framework"], command["runs"], command["gathered"], requests))


# ---------------------------------------------------------------- the benchmark


class Worker:
    def __init__(self, frameworks: list[str], turns: int, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, __file__, "--worker", "--frameworks", ",".join(frameworks), "--turns", str(turns)],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
                start_new_session=True,
            )
        self.replies: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(MARK):
                self.replies.put(line[len(MARK) :])
        self.replies.put(None)

    def read(self, server: PrefectServer, timeout: float) -> dict[str, Any]:
        """The worker's next reply; raises if the worker or the server is gone, or after
        ``timeout`` seconds (a worker whose server died would retry for minutes)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.replies.get(timeout=1)
            except queue.Empty:
                problem = server.problem()
                if problem is None and time.monotonic() > deadline:
                    problem = f"no answer from a worker in {timeout:.0f} s"
                if problem is not None:
                    raise RuntimeError(problem) from None
                continue
            if line is None:
                log = self.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"a worker exited ({self.process.wait()}):\n{log}")
            return dict(json.loads(line))

    def send(self, framework: str, runs: int, gathered: bool) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"framework": framework, "runs": runs, "gathered": gathered}) + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        stop(self.process)


def _load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Phase:
    """The replies of one measurement (one or several workers), merged."""

    def __init__(self, replies: list[dict[str, Any]], wall: float, load: tuple[str, str]) -> None:
        self.wall = wall
        self.load = load
        self.times = [t for reply in replies for t in reply["times"]]
        self.cpu = sum(reply["cpu"] for reply in replies)
        self.errors: Counter[str] = Counter()
        self.first: dict[str, str] = {}
        for reply in replies:
            for error in reply["errors"]:
                self.errors[_kind(error)] += 1
                self.first.setdefault(_kind(error), error[:300])
            for error in reply["retried"]:
                self.errors[_kind(error)] += 1
                self.first.setdefault(_kind(error), error[:300])
        self.failed = sum(len(reply["errors"]) for reply in replies)
        self.retried = sum(len(reply["retried"]) for reply in replies)
        self.requests: Counter[str] = Counter()
        for reply in replies:
            self.requests.update(reply["requests"])
        self.server_cpu = 0.0
        self.database_cpu = 0.0

    @property
    def per_minute(self) -> float:
        return len(self.times) / self.wall * 60

    def error_text(self) -> str:
        return f"{self.failed} failed, {self.retried} answered 503 & co"


def _measure_on(
    workers: list[Worker],
    framework: str,
    runs: int,
    gathered: bool,
    server: PrefectServer,
    timeout: float,
    profile: Path | None = None,
) -> Phase:
    load_start = _load()
    server_cpu, database_cpu = server.cpu()
    spies: list[subprocess.Popen[bytes]] = []
    if profile is not None:  # the client and the Prefect server (with its subprocesses)
        py_spy = [str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses", "--rate", "250"]
        for who, pid in (("client", workers[0].process.pid), ("server", server.process.pid)):
            output = profile.with_name(f"{profile.stem}-{who}.txt")
            spies.append(
                subprocess.Popen(
                    [*py_spy, "--format", "raw", "--nonblocking", "--pid", str(pid), "--output", str(output)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        time.sleep(2)
    started = time.perf_counter()
    for item in workers:
        item.send(framework, runs, gathered)
    replies = [item.read(server, timeout) for item in workers]
    wall = time.perf_counter() - started
    for spy in spies:
        stop(spy, signal.SIGINT)
    phase = Phase(replies, wall, (load_start, _load()))
    server_after, database_after = server.cpu()
    phase.server_cpu, phase.database_cpu = server_after - server_cpu, database_after - database_cpu
    return phase


def _print_errors(phases: list[Phase], indent: str = "    ") -> None:
    errors: Counter[str] = Counter()
    first: dict[str, str] = {}
    for phase in phases:
        errors.update(phase.errors)
        for kind, message in phase.first.items():
            first.setdefault(kind, message)
    for kind, count in errors.most_common():
        print(f"{indent}{count:4d} x {first[kind]}")


def _line(rep: int, what: str, phase: Phase) -> None:
    print(
        f"  rep {rep + 1}: {what}: {phase.wall:6.2f} s, {phase.per_minute:6.1f} runs/min,"
        f" p50 {_pct(phase.times, 0.5):5.2f} s, p95 {_pct(phase.times, 0.95):5.2f} s,"
        f" client CPU {phase.cpu:5.2f} s, server CPU {phase.server_cpu:5.2f} s + db {phase.database_cpu:5.2f} s,"
        f" {phase.error_text()}; load {phase.load[0]} -> {phase.load[1]}",
        flush=True,
    )


class Backend:
    """One server and its workers (started idle), and what was measured on it."""

    def __init__(self, name: str, options: argparse.Namespace, root: Path, stack: ExitStack) -> None:
        self.name = name
        self.options = options
        self.server = prefect_server(name, root / "server", stack)
        env = base_env()
        env.update(
            {
                "PREFECT_API_URL": self.server.api_url,
                "PREFECT_LOCAL_STORAGE_PATH": str(root / "storage"),
                "PREFECT_LOGGING_LEVEL": "WARNING",
            }
        )
        everyone: list[Worker] = []

        def close_all() -> None:
            for item in everyone:
                item.close()

        stack.callback(close_all)

        def spawn(folder: str, frameworks: list[str]) -> Worker:
            home = root / folder
            home.mkdir()
            own = {**env, "HOME": str(home), "PREFECT_HOME": str(home / ".prefect")}
            everyone.append(Worker(frameworks, options.turns, own, home / "log"))
            return everyone[-1]

        self.in_processes = ["nexusflow", "prefectagent"] if options.processes_baseline else ["nexusflow"]
        self.workers = [spawn(f"client-{index}", self.in_processes) for index in range(options.processes)]
        self.gatherer = spawn("client-gathered", list(FRAMEWORKS)) if options.gathered else None
        self.everyone = everyone
        self.multi: dict[str, list[Phase]] = {framework: [] for framework in self.in_processes}
        self.gathered: dict[str, list[Phase]] = {framework: [] for framework in FRAMEWORKS}
        self.stopped: str | None = None

    def ready(self) -> None:
        for item in self.everyone:
            item.read(self.server, self.options.timeout)  # imported and warmed up
        print(f"{self.name}: server up in {self.server.started_in:.1f} s, workers ready; load {_load()}", flush=True)

    def repetition(self, rep: int) -> None:
        """The processes' runs, then the gathered runs; frameworks alternate their order."""
        options, server = self.options, self.server
        for framework in self.in_processes if rep % 2 == 0 else self.in_processes[::-1]:
            if self.workers and options.runs:
                phase = _measure_on(self.workers, framework, options.runs, False, server, options.timeout)
                self.multi[framework].append(phase)
                _line(rep, f"{self.name:8s} {options.processes} x {options.runs}, {FRAMEWORKS[framework]:12s}", phase)
        for framework in list(FRAMEWORKS) if rep % 2 == 0 else list(FRAMEWORKS)[::-1]:
            if self.gatherer is not None:
                phase = _measure_on([self.gatherer], framework, options.gathered, True, server, options.timeout)
                self.gathered[framework].append(phase)
                _line(rep, f"{self.name:8s} {options.gathered} gathered, {FRAMEWORKS[framework]:12s}", phase)

    def profile(self, folder: Path) -> None:
        if self.gatherer is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{self.name}-nexusflow-gathered"
        options = self.options
        phase = _measure_on([self.gatherer], "nexusflow", options.gathered, True, self.server, options.timeout, target)
        print(f"{self.name}: profiled (not counted): {phase.wall:.2f} s; py-spy stacks in {target}-*.txt")

    def report(self) -> None:
        options = self.options
        reps = max((len(phases) for phases in [*self.multi.values(), *self.gathered.values()]), default=0)
        print(f"\n-- {self.name}: medians of {reps} repetition(s)")
        if self.stopped:
            print(f"  stopped early: {self.stopped}")
        if any(self.multi.values()):
            title = f"{options.processes} processes x {options.runs} runs"
            report(title, options.processes * options.runs, self.multi, options)
        if any(self.gathered.values()):
            report(f"{options.gathered} runs gathered in one process", options.gathered, self.gathered, options)


def _median(phases: list[Phase], value: Callable[[Phase], float]) -> float:
    return statistics.median(value(phase) for phase in phases)


def report(title: str, n: int, phases_of: dict[str, list[Phase]], options: argparse.Namespace) -> None:
    """One table: a row per framework (CPU and API requests per run), its errors, the ratio."""
    print(f"  {title} (CPU and API requests per run):")
    columns: tuple[str, ...] = ("wall s", "runs/min", "p50 s", "p95 s", "client CPU", "server CPU", "db CPU")
    columns += ("requests", "503 & co", "failed")
    print(f"    {'':12s} " + " ".join(f"{column:>10s}" for column in columns))
    for framework, phases in phases_of.items():
        times = [t for phase in phases for t in phase.times]
        cells = (
            f"{_median(phases, lambda p: p.wall):10.2f}",
            f"{_median(phases, lambda p: p.per_minute):10.1f}",
            f"{_pct(times, 0.5):10.2f}",
            f"{_pct(times, 0.95):10.2f}",
            f"{_median(phases, lambda p: p.cpu) / n * 1000:7.0f} ms",
            f"{_median(phases, lambda p: p.server_cpu) / n * 1000:7.0f} ms",
            f"{_median(phases, lambda p: p.database_cpu) / n * 1000:7.0f} ms",
            f"{_median(phases, lambda p: sum(p.requests.values())) / n:10.1f}",
            f"{sum(p.retried for p in phases):10d}",
            f"{sum(p.failed for p in phases):>4d} of {len(phases) * n}",
        )
        print(f"    {FRAMEWORKS[framework]:12s} " + " ".join(cells))
        _print_errors(phases, "      ")
    if len(phases_of) == 2:
        ratios = [ours.wall / theirs.wall for ours, theirs in zip(*phases_of.values(), strict=True)]
        print(
            f"    ratio nexusflow / PrefectAgent, wall: {statistics.median(ratios):.2f}x"
            f" (per rep {', '.join(f'{r:.2f}' for r in ratios)})"
        )
    for framework, phases in phases_of.items() if options.top else ():
        requests: Counter[str] = Counter()
        for phase in phases:
            requests.update(phase.requests)
        print(f"    {FRAMEWORKS[framework]}'s API requests per run:")
        for request, count in requests.most_common(options.top):
            print(f"      {count / (len(phases) * n):5.1f}  {request}")


def summary(backends: list[Backend], options: argparse.Namespace) -> None:
    """The backends side by side: nexusflow's processes' throughput and the gathered ratio."""
    print(f"\n== summary ({options.turns} turns a run; medians; errors summed over the repetitions)")
    head = f"{options.processes} x {options.runs}: runs/min"
    columns = f"{head:>22s} {'p50 s':>6s} {'p95 s':>6s} {'failed':>7s} {'503 & co':>8s}"
    print(f"  {'backend':8s} {columns}   gathered wall: ours / PrefectAgent")
    for backend in backends:
        multi = backend.multi["nexusflow"]
        times = [t for phase in multi for t in phase.times]
        cells = (
            f"{_median(multi, lambda p: p.per_minute):22.1f} {_pct(times, 0.5):6.2f} {_pct(times, 0.95):6.2f}"
            f" {sum(p.failed for p in multi):7d} {sum(p.retried for p in multi):8d}"
            if multi
            else f"{'-':>22s} {'':6s} {'':6s} {'':7s} {'':8s}"
        )
        ours, theirs = backend.gathered["nexusflow"], backend.gathered["prefectagent"]
        ratio = (
            f"{_median(ours, lambda p: p.wall):6.2f} s / {_median(theirs, lambda p: p.wall):6.2f} s"
            f" = {statistics.median(a.wall / b.wall for a, b in zip(ours, theirs, strict=False)):.2f}x"
            if ours and theirs
            else "-"
        )
        print(f"  {backend.name:8s} {cells}   {ratio}")


def main(options: argparse.Namespace) -> None:
    """Every backend's server and workers start first; the repetitions then go round the
    backends (the order alternating), so that a change of the machine's load falls on all."""
    started = time.perf_counter()
    print(
        f"throughput: {options.processes} processes x {options.runs} runs, {options.gathered} gathered,"
        f" {options.repeats} repetition(s), backends {', '.join(options.backends)}; {options.turns} turns a run"
        f" ({options.turns - 1} tool calls); {os.cpu_count()} cores, load {_load()}",
        flush=True,
    )
    root = Path(tempfile.mkdtemp(prefix="nexusflow-throughput-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        backends = [Backend(name, options, root / name, stack) for name in options.backends]
        for backend in backends:
            backend.ready()
        for rep in range(options.repeats):
            for backend in backends if rep % 2 == 0 else backends[::-1]:
                if backend.stopped is None:
                    try:
                        backend.repetition(rep)
                    except RuntimeError as exc:
                        backend.stopped = str(exc)
                        print(f"!! {backend.name}: stopped: {exc}", flush=True)
        for backend in backends:
            if options.profile is not None and backend.stopped is None:
                backend.profile(options.profile)
        for backend in backends:
            backend.report()
        summary(backends, options)
    print(f"\ndone in {time.perf_counter() - started:.0f} s; load {_load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--runs", type=int, default=20, help="runs per process, one after another")
    parser.add_argument(
        "--processes-baseline", action="store_true", help="the processes' runs with PrefectAgent too, interleaved"
    )
    parser.add_argument("--gathered", type=int, default=20, help="runs gathered in one process (0: skip)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--turns", type=int, default=3, help="turns a run; each but the last calls one tool")
    parser.add_argument(
        "--backends", type=lambda text: text.split(","), default=["sqlite", "postgres"], help="sqlite,postgres"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for one measurement")
    parser.add_argument("--top", type=int, default=12, help="request kinds listed per framework")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy one more gathered nexusflow run into DIR")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--frameworks", default="nexusflow", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        import anyio

        anyio.run(worker, options.frameworks.split(","), options.turns)
    else:
        main(options)
