"""A thousand runs of a realistic mix in one process: does anything grow?

Run ``i`` is one of six kinds, in turn: tool calls (two turns calling a tool), a pending
run (its tool asks a person) answered with ``client.resume``, typed output (one repair), a
sub-agent (an agent as a tool), a fan-out (``client.map`` of 3) and an ACP session (the
scripted ACP agent, ``tests/support/helpers/acp_agent.py``, calling a served tool over MCP). Every
run has a session of its own, and every result is checked: a wrong one stops the soak. The
runs go one after another, or ``--wave`` at a time, gathered (as a scheduled job or a
fan-out starts them; each ACP run of a wave has an agent folder of its own).

After the warm-up (the first ``--warm-up`` share of the runs), every ``--every`` runs (a
whole number of mixes and of waves, so every sample is taken at the same point of the mix,
with no run in flight) it samples, after a garbage collection: this process's RSS, open
file descriptors and threads, its live child processes (not the Prefect server it started),
the entries of its temporary directory (a private ``TMPDIR``, so other processes' files do
not count), and rows on the Prefect server: global concurrency limits named ``nexusflow-*``,
block documents, variables and artifacts. Each is reported as a least-squares slope per 100
runs, with its first and last sample, against a threshold (``THRESHOLDS``). Artifacts (each
run's transcript, summary and progress, keyed by its session) stay until the session is
forgotten: they grow with the runs, reported per run, and the prune must remove them.

At the end, ``prune_sessions(older_than=0s)`` removes the finished sessions (every finished
session on the server, as ``nexusflow prune --older-than 0s`` would), and the soak
reports what of the runs is left that prune did not remove: sessions, records in the result
storage, locks, artifacts, temporary files, child processes; and what Prefect keeps as its
history (flow runs, with their task runs and logs, and result records it persisted itself).

With ``--topology`` the runs are split over two worker processes (machines with their own
HOME, Prefect home and temp dir) on a Prefect server on PostgreSQL with its results in an S3
bucket (moto's server), as ``tests/support/topology.py`` starts them; each worker samples itself,
and this process, a third machine, prunes when both are done.

It exits 1 when a measure grows or prune left something; ``--report`` writes the reports as
JSON. ``tests/homes/test_soak.py`` runs it with 200 runs in CI.

    python benchmarks/soak.py                    # 1000 runs on SQLite, one after another
    python benchmarks/soak.py --runs 200 --wave 6 --postgres
    python benchmarks/soak.py --topology --wave 6
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

ACP_AGENT = Path(__file__).resolve().parent.parent / "tests" / "support" / "helpers" / "acp_agent.py"
KINDS = ("tools", "pending", "typed", "sub-agent", "fan-out", "acp")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Threshold:
    per_100: float
    """The largest slope per 100 runs that counts as flat."""
    unit: str
    scale: float = 1.0
    """Printed values are divided by this (bytes to MiB)."""
    step: float = 0.0
    """The smallest amount the measure moves by, however little was kept: two such steps
    over the sampled runs count as flat (``limit``), so a short soak (CI's 150 sampled runs)
    is not failed by one step its window cannot tell from a leak."""

    def limit(self, runs: float) -> float:
        """The largest flat slope over ``runs`` sampled runs."""
        return max(self.per_100, 2 * self.step * 100 / runs) if runs > 0 else self.per_100


ARENA = 1 * MIB
"""CPython's allocator (3.10 on, 64-bit) takes memory from the system in 1 MiB arenas and
gives one back only once it is empty: RSS moves in such steps (one of 1.1 MiB at run 114 of a
200-run soak read +1.28 MiB / 100 runs, its other samples flat)."""

THRESHOLDS: dict[str, Threshold] = {
    # Python's allocator keeps arenas it once needed; 1 MiB per 100 runs is 10 KiB a run.
    "rss": Threshold(1.0 * MIB, "MiB", MIB, step=ARENA),
    "fds": Threshold(1.0, "fds"),
    "threads": Threshold(1.0, "threads"),
    "children": Threshold(0.5, "processes"),
    "temp files": Threshold(0.5, "entries"),
    # Counted while runs go on: a lock whose let-go lands a second after the sample (later on
    # a busy SQLite) is one row more, so the count wanders by a row or two (1 to 3 over a CI
    # soak whose first and last samples were both 1): one row is its step, as an arena is rss's.
    "concurrency limits": Threshold(0.5, "rows", step=1.0),
    "blocks": Threshold(0.5, "rows"),
    "variables": Threshold(0.5, "rows"),
}
HISTORY = ("artifacts",)
"""Sampled and reported, but grow with the runs by design, until their sessions are pruned."""


@dataclass
class Report:
    runs: int
    seconds: float
    samples: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    """(runs done, measure -> value) after the warm-up."""
    left: dict[str, list[str]] = field(default_factory=dict)
    """What of the finished runs prune did not remove, by kind (empty lists when nothing)."""
    pruned: int = 0
    """The soak's sessions (nested ones included) the prune forgot."""
    prune_seconds: float = 0.0
    history: dict[str, int] = field(default_factory=dict)
    """Prefect's history of the runs after the prune, which it keeps by design: flow runs
    (with their task runs and logs) and the result records Prefect persisted itself."""
    kept: list[str] = field(default_factory=list)
    """The result records Prefect persisted itself, outside nexusflow's folder, which prune
    cannot find: one per sub-agent run until a run started in a task kept its own
    ``persist_result`` (the subflow inherited its calling task's); none since."""
    times: dict[str, list[float]] = field(default_factory=dict)
    """Seconds each run took, by kind."""
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds of the soak, by process, when its runs were done."""

    def slope(self, name: str) -> float:
        """Least-squares slope per 100 runs."""
        xs = [float(done) for done, _ in self.samples]
        ys = [values[name] for _, values in self.samples]
        if len(set(xs)) < 2:
            return 0.0
        return statistics.linear_regression(xs, ys).slope * 100

    def sampled_runs(self) -> int:
        return self.samples[-1][0] - self.samples[0][0] if self.samples else 0

    def growing(self) -> list[str]:
        """The measures whose slope exceeds their threshold."""
        span = self.sampled_runs()
        return [name for name, limit in THRESHOLDS.items() if self.slope(name) > limit.limit(span)]

    def leftovers(self) -> dict[str, list[str]]:
        return {kind: items for kind, items in self.left.items() if items}

    def text(self) -> str:
        first, last = self.samples[0], self.samples[-1]
        lines = [
            f"{self.runs} runs in {self.seconds:.0f} s ({self.seconds / self.runs * 1000:.0f} ms a run); "
            f"{len(self.samples)} samples from run {first[0]} to {last[0]}",
            f"  {'measure':20s} {'slope / 100 runs':>17s} {'first':>10s} {'last':>10s}  {'flat if <':>10s}",
        ]
        for name, limit in THRESHOLDS.items():
            slope, flat = self.slope(name), limit.limit(self.sampled_runs())
            verdict = "flat" if slope <= flat else "GROWS"
            lines.append(
                f"  {name:20s} {slope / limit.scale:>+17.2f} {first[1][name] / limit.scale:>10.1f} "
                f"{last[1][name] / limit.scale:>10.1f}  {flat / limit.scale:>10.2f} {limit.unit:9s} {verdict}"
            )
        for name in HISTORY:
            lines.append(
                f"  {name:20s} {self.slope(name):>+17.2f} {first[1][name]:>10.0f} {last[1][name]:>10.0f}"
                f"  (history: {self.slope(name) / 100:.2f} a run)"
            )
        lines.append(
            "median seconds a run: "
            + ", ".join(f"{kind} {statistics.median(times):.2f}" for kind, times in self.times.items())
        )
        lines.append("CPU seconds: " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in self.cpu.items()))
        return "\n".join(lines) + "\n" + self.left_text()

    def left_text(self) -> str:
        if not self.history:
            return "left by the runs (not pruned here): " + ", ".join(
                f"{kind} {', '.join(items) or 'none'}" for kind, items in self.left.items()
            )
        lines = [f"prune removed {self.pruned} sessions in {self.prune_seconds:.0f} s; left behind:"]
        for kind, items in self.left.items():
            shown = ", ".join(items[:5]) + (f" ... ({len(items)})" if len(items) > 5 else "")
            lines.append(f"  {kind:20s} {shown or 'nothing'}")
        kept = ", ".join(f"{count} {name}" for name, count in self.history.items())
        lines.append(f"kept as Prefect's history (not prune's): {kept}")
        if self.kept:
            lines.append(f"  outside nexusflow/, not pruned: {', '.join(self.kept[:3])} ...")
        return "\n".join(lines)


# ---------------------------------------------------------------- what is measured


def _rss() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _process_tree() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    return children


def _descendants(skip: set[int]) -> list[int]:
    """This process's live descendants, except the trees rooted at ``skip``."""
    tree, found, todo = _process_tree(), [], [os.getpid()]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in skip:
                found.append(child)
                todo.append(child)
    return found


async def _server_rows() -> dict[str, float]:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        counts = {}
        for name, path in (("blocks", "/block_documents/count"), ("variables", "/variables/count")):
            counts[name] = float((await client.request("POST", path, json={})).json())
        counts["artifacts"] = float((await client.request("POST", "/artifacts/count", json={})).json())
        counts["concurrency limits"] = float(len(await _limits(client)))
    return counts


async def _limits(client: Any) -> list[str]:
    """Names of the server's global concurrency limits named ``nexusflow-*``."""
    names: list[str] = []
    while True:
        page = await client.read_global_concurrency_limits(limit=200, offset=len(names))
        names += [limit.name for limit in page]
        if len(page) < 200:
            return [name for name in names if name.startswith("nexusflow-")]


def _idle_pool_threads() -> int:
    """AnyIO's worker threads waiting for work. The pool is bounded (its limiter's 40) and
    grows to what a wave needs; an idle worker ends only when a later call finds it idle for
    10 s, so their number swung between samples (6 to 15 threads in all over 200 runs) and
    made the slope noise. A worker still busy when a sample is taken (no run is in flight
    then) counts: a thread that never returns is a leak."""
    return sum(1 for thread in threading.enumerate() if thread in getattr(thread, "idle_workers", ()))


async def sample(tmp: Path, skip: set[int]) -> dict[str, float]:
    gc.collect()
    values = {
        "rss": _rss(),
        "fds": float(len(os.listdir("/proc/self/fd"))),
        "threads": float(len(os.listdir("/proc/self/task")) - _idle_pool_threads()),
        "children": float(len(_descendants(skip))),
        "temp files": float(len(os.listdir(tmp))),
    }
    return values | await _server_rows()


# ---------------------------------------------------------------- the mix


class Mix:
    """The six kinds of run, their clients and toolkits made once, as a long-lived process would."""

    def __init__(self, acp_dir: Path, stack: Any, slots: int = 1) -> None:
        self.acp_dir = acp_dir
        self.stack = stack
        self.slots = slots
        """ACP runs at once: each has an agent folder of its own (its script's prompt count)."""

    async def start(self) -> None:
        from pydantic import BaseModel

        from nexusflow import (
            AcpLaunch,
            CliStyle,
            ModelRequest,
            Toolkit,
            Transport,
            create_cli_client,
            create_in_process_client,
            current_answer,
            suspend,
            tool,
        )

        class Fact(BaseModel):
            topic: str
            letters: int

        self.fact = Fact

        @tool
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @tool
        def delete_files(pattern: str) -> str:
            """Delete the files matching a pattern, once a person says yes."""
            if current_answer() is None:
                return suspend(f"May I delete every file matching {pattern}?")
            return f"deleted {pattern}"

        def turn(request: ModelRequest) -> int:
            return sum(message.role == "assistant" for message in request.messages)

        def adding(request: ModelRequest) -> Any:
            step = turn(request)
            if step < 2:
                return {"tool_calls": [{"name": "add", "arguments": {"a": step, "b": 2}}]}
            return "sum " + request.messages[-1].content

        def asking(request: ModelRequest) -> Any:
            if turn(request) == 0:
                return {"tool_calls": [{"name": "delete_files", "arguments": {"pattern": "*.tmp"}}]}
            return "done: " + request.messages[-1].content

        def typed(request: ModelRequest) -> Any:
            topic = request.messages[0].content
            if turn(request) == 0:
                return json.dumps({"topic": topic})  # no letters: sent back for one repair
            return json.dumps({"topic": topic, "letters": len(topic)})

        def writing(request: ModelRequest) -> Any:
            if turn(request) == 0:
                return {"tool_calls": [{"name": "reviewer", "arguments": {"prompt": "Review: soak."}}]}
            return "revised after " + request.messages[-1].content

        def echo(request: ModelRequest) -> Any:
            return request.messages[-1].content + "!"

        self.tools = await self.stack.enter_async_context(await Toolkit.load(tools=[add]))
        self.asks = await self.stack.enter_async_context(await Toolkit.load(tools=[delete_files]))
        self.adding = create_in_process_client(adding)
        self.asking = create_in_process_client(asking)
        self.typed = create_in_process_client(typed)
        self.echo = create_in_process_client(echo)
        reviewer = create_in_process_client(lambda request: '{"approved": true}')
        self.reviewed = Toolkit([reviewer.as_tool(name="reviewer", description="Review a draft.")])
        self.writer = create_in_process_client(writing)
        prompts = [[{"tool": "add", "arguments": {"a": 4, "b": 5}}, {"say": "nine"}]]
        initialize = {"protocolVersion": 1, "agentCapabilities": {"mcpCapabilities": {"http": True}}}
        style = CliStyle(
            name="soak",
            args=[],
            prompt_mode="stdin",
            verified="soak",
            acp=AcpLaunch(args=[str(ACP_AGENT)], verified="soak"),
        )
        self.acp = []
        for slot in range(self.slots):
            folder = self.acp_dir / str(slot)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "script.json").write_text(json.dumps({"initialize": initialize, "prompts": prompts}))
            env = {"ACP_AGENT_DIR": str(folder)}
            self.acp.append(
                (folder, create_cli_client(style=style, command=sys.executable, transport=Transport.ACP, env=env))
            )

    async def run(self, index: int, session: str) -> None:
        """Run ``index`` of the soak, as session ``session``; raises if it went wrong."""
        from nexusflow import Answer

        kind = KINDS[index % len(KINDS)]
        if kind == "tools":
            result = await self.adding.run("add", self.tools, session_id=session)
            _expect(result, "sum 3")
        elif kind == "pending":
            result = await self.asking.run("clean up", self.asks, session_id=session)
            if result.status != "pending" or result.request is None:
                raise RuntimeError(f"{kind}: expected pending, got {result.status}: {result.error}")
            answer = Answer(id=result.request.id, ok=True)
            _expect(await self.asking.resume(session, answer, self.asks), "done: deleted *.tmp")
        elif kind == "typed":
            result = await self.typed.run("Prefect", session_id=session, output_type=self.fact)
            _expect(result, '{"topic": "Prefect", "letters": 7}')
            if result.metrics.output_repairs != 1:
                raise RuntimeError(f"{kind}: {result.metrics.output_repairs} repairs, expected 1")
        elif kind == "sub-agent":
            result = await self.writer.run("Write and have it reviewed.", self.reviewed, session_id=session)
            _expect(result, 'revised after {"approved": true}')
        elif kind == "fan-out":
            results = await self.echo.map(["a", "b", "c"], max_concurrency=3, session_id=session)
            for result, text in zip(results, ["a!", "b!", "c!"], strict=True):
                _expect(result, text)
        else:
            folder, acp = self.acp[index // len(KINDS) % self.slots]
            for name in ("prompt_count", "sessions.json", "log.jsonl"):
                (folder / name).unlink(missing_ok=True)
            result = await acp.run("add 4 and 5", self.tools, session_id=session)
            _expect(result, "nine")
            if result.metrics.tool_calls != 1:
                raise RuntimeError(f"{kind}: {result.metrics.tool_calls} served tool calls, expected 1")


def _expect(result: Any, text: str) -> None:
    if result.status != "completed" or result.text != text:
        raise RuntimeError(
            f"run {result.session_id}: {result.status} {result.text!r} (expected {text!r}): {result.error}"
        )


# ---------------------------------------------------------------- the soak


@contextmanager
def private_tmp(path: Path) -> Iterator[Path]:
    """``TMPDIR`` (and ``tempfile``'s cached choice) pointed at ``path`` for this process and
    its children, so that its temporary files are counted apart from other processes'."""
    path.mkdir(parents=True, exist_ok=True)
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = None
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before
        tempfile.tempdir = None


def every(runs: int, wave: int = 1) -> int:
    """Runs between samples: a whole number of mixes and of waves, ~50 samples."""
    unit = math.lcm(len(KINDS), wave)
    return unit * max(1, round(runs * 0.9 / 50 / unit))


async def soak(
    runs: int,
    scratch: Path,
    *,
    warm_up: float = 0.1,
    step: int | None = None,
    wave: int = 1,
    prefix: str | None = None,
    prune: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """``runs`` runs of the mix, ``wave`` at a time (gathered, as a scheduled job or a fan-out
    starts them), sampled after the warm-up every ``step`` runs between waves, when none is
    in flight; then a prune of the finished sessions (unless ``prune`` is false: another
    process prunes). ``scratch`` holds a private temp dir and the ACP agents' folders.
    Children this process has already (its Prefect server) are not counted, nor their
    descendants."""
    from contextlib import AsyncExitStack

    import anyio

    step = step or every(runs, wave)
    if step % wave:
        raise ValueError(f"samples every {step} runs fall inside waves of {wave}")
    unit = math.lcm(len(KINDS), wave)
    first = unit * math.ceil(runs * warm_up / unit)
    skip = set(_process_tree().get(os.getpid(), []))
    started = time.perf_counter()
    report = Report(runs, 0.0)
    prefix = prefix or f"soak-{os.getpid()}-{int(time.time())}"
    with private_tmp(scratch / "tmp") as tmp:
        async with AsyncExitStack() as stack:
            mix = Mix(scratch / "acp-agent", stack, slots=math.ceil(wave / len(KINDS)))
            await mix.start()

            async def one(index: int) -> None:
                began = time.perf_counter()
                await mix.run(index, f"{prefix}-{index}")
                report.times.setdefault(KINDS[index % len(KINDS)], []).append(time.perf_counter() - began)

            for begin in range(0, runs, wave):
                async with anyio.create_task_group() as group:
                    for index in range(begin, min(begin + wave, runs)):
                        group.start_soon(one, index)
                done = min(begin + wave, runs)
                if done >= first and (done - first) % step == 0:
                    report.samples.append((done, await sample(tmp, skip)))
                    if progress is not None:
                        _progress(progress, report, started)
            if not report.samples or report.samples[-1][0] != runs:
                report.samples.append((runs, await sample(tmp, skip)))
        report.seconds = time.perf_counter() - started
        report.cpu = _cpu()
        report.left = {"temp files": sorted(os.listdir(tmp)), "children": [str(pid) for pid in _descendants(skip)]}
        if prune:
            await finish(report, prefix)
    return report


async def finish(report: Report, prefix: str) -> None:
    """The prune of every finished session, and what of the runs named ``prefix...`` it
    left on the server and in the result storage."""
    from nexusflow import prune_sessions

    began = time.perf_counter()
    pruned = await prune_sessions(older_than=timedelta(0))
    report.prune_seconds = time.perf_counter() - began
    report.pruned = sum(forgotten.session_id.startswith(prefix) for forgotten in pruned)
    report.left = await _left(prefix) | report.left
    report.history = await _history()
    report.kept = await _prefect_records()
    report.history["result records Prefect persisted outside nexusflow/"] = len(report.kept)


def _cpu() -> dict[str, float]:
    """CPU seconds (user + system) of this process, and of its children that ended (the
    ACP agents)."""
    import resource

    own, ended = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"this process": own.ru_utime + own.ru_stime, "its ended children": ended.ru_utime + ended.ru_stime}


def _progress(say: Callable[[str], None], report: Report, started: float) -> None:
    done, values = report.samples[-1]
    say(
        f"{done} runs, {time.perf_counter() - started:.0f} s: rss {values['rss'] / MIB:.1f} MiB, "
        f"fds {values['fds']:.0f}, threads {values['threads']:.0f}, children {values['children']:.0f}, "
        f"temp {values['temp files']:.0f}, limits {values['concurrency limits']:.0f}, "
        f"blocks {values['blocks']:.0f}, variables {values['variables']:.0f}, artifacts {values['artifacts']:.0f}"
    )


async def _left(prefix: str) -> dict[str, list[str]]:
    """What of the soak's finished runs is still on the server or in the result storage."""
    from prefect.client.orchestration import get_client

    from nexusflow import list_sessions

    async with get_client() as client:
        limits = [name for name in await _limits(client) if prefix in name]
        keyed = {"artifacts": {"key": {"like_": prefix}}, "limit": 200}
        artifacts = [item["key"] for item in (await client.request("POST", "/artifacts/filter", json=keyed)).json()]
    return {
        "sessions": [info.session_id for info in await list_sessions() if info.session_id.startswith(prefix)],
        "records": await _records(prefix),
        "locks": limits,
        "artifacts": artifacts,
    }


async def _history() -> dict[str, int]:
    """What Prefect keeps of the runs: their flow runs (with their task runs and logs), and
    the results it persisted itself, outside nexusflow's folder of the result storage."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        runs = (await client.request("POST", "/flow_runs/count", json={})).json()
    return {"flow runs on the server": int(runs)}


async def _prefect_records() -> list[str]:
    from prefect.filesystems import LocalFileSystem

    from nexusflow._prefect.storage import ROOT, step_storage
    from nexusflow._prefect.storage_tree import _s3

    storage = await step_storage()
    if isinstance(storage, LocalFileSystem):
        root = Path(storage.basepath or ".").expanduser()
        found = [path.relative_to(root) for path in root.rglob("*") if path.is_file()]
        return [str(path) for path in found if path.parts[0] != ROOT]
    s3 = _s3(storage)
    if s3 is None:
        return []
    client, bucket, folder = s3
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder)
    keys = [item["Key"][len(folder) :] for page in pages for item in page.get("Contents", [])]
    return [key for key in keys if not key.startswith(f"{ROOT}/")]


async def _records(prefix: str) -> list[str]:
    """nexusflow's records of the soak's sessions in the result storage: every file under
    ``nexusflow/`` on a local storage (a conversation's name is a digest), else the sessions'
    folders."""
    from prefect.filesystems import LocalFileSystem

    from nexusflow._prefect.storage import ROOT, step_storage
    from nexusflow._prefect.storage_tree import children

    storage = await step_storage()
    if isinstance(storage, LocalFileSystem):
        root = Path(storage.basepath or ".").expanduser() / ROOT
        found = [str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()]
        return sorted(name for name in found if prefix in name or name.startswith("conversations/"))
    return [f"sessions/{name}" for name in await children(storage, f"{ROOT}/sessions") if prefix in name]


def main(options: argparse.Namespace) -> int:
    """0 when every measure is flat and prune left nothing; 1 otherwise."""
    import anyio
    from _servers import prefect_server
    from loop_overhead import load

    if options.worker is not None:
        report = anyio.run(_worker, options)
        options.worker.write_text(json.dumps(dataclasses.asdict(report)))
        return 0
    where = "PostgreSQL + S3, two workers" if options.topology else "PostgreSQL" if options.postgres else "SQLite"
    print(f"soak: {options.runs} runs, {where}, waves of {options.wave}; load {load()}", flush=True)
    with ExitStack() as stack:
        root = Path(tempfile.mkdtemp(prefix="soak-"))
        stack.callback(shutil.rmtree, root, True)
        if options.topology:
            reports = _over_two_workers(options, root, stack)
        else:
            server = prefect_server("postgres" if options.postgres else "sqlite", root / "server", stack)
            print(f"server up in {server.started_in:.0f} s", flush=True)
            os.environ.update(
                _quiet(server.api_url, root / "client") | {"PREFECT_LOCAL_STORAGE_PATH": str(root / "storage")}
            )

            async def go() -> Report:
                return await soak(
                    options.runs, root, warm_up=options.warm_up, step=options.every, wave=options.wave, progress=_say
                )

            reports = {"": anyio.run(go)}
            reports[""].cpu |= dict(zip(("the Prefect server", "its database"), server.cpu(), strict=True))
    failed = False
    for name, report in reports.items():
        print(f"\n{name}" if name else "")
        print(report.text())
        growing, left = report.growing(), report.leftovers()
        failed = failed or bool(growing or left)
        print(
            f"{'GROWING: ' + ', '.join(growing) if growing else 'all flat'}; "
            f"{'LEFT: ' + ', '.join(left) if left else 'nothing left'}"
        )
    if options.report is not None:
        options.report.write_text(json.dumps({name: dataclasses.asdict(report) for name, report in reports.items()}))
    print(f"load {load()}")
    return 1 if failed else 0


def _say(line: str) -> None:
    print(line, flush=True)


def _quiet(api_url: str, home: Path) -> dict[str, str]:
    return {
        "PREFECT_API_URL": api_url,
        "PREFECT_HOME": str(home),
        "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
        "DO_NOT_TRACK": "1",
    }


async def _worker(options: argparse.Namespace) -> Report:
    """One worker of ``--topology``: its share of the runs, no prune (the operator's)."""
    return await soak(
        options.runs,
        options.worker.parent,
        warm_up=options.warm_up,
        step=options.every,
        wave=options.wave,
        prefix=options.prefix,
        prune=False,
        progress=_say,
    )


def _over_two_workers(options: argparse.Namespace, root: Path, stack: ExitStack) -> dict[str, Report]:
    """The topology's servers, then two worker processes (machines a and b: their own HOME,
    Prefect home and temp dir; they share the server and the bucket), each running half the
    runs, then the prune from this process (a third machine, the operator's shell)."""
    import anyio
    from _servers import s3_topology, stop

    topology = s3_topology(root / "topology", stack)
    print(f"PostgreSQL, Prefect server and S3 up in {topology.server.started_in:.0f} s", flush=True)
    prefix = f"soak-{os.getpid()}-{int(time.time())}"
    workers: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for name in ("a", "b"):
        machine = root / name
        (machine / "home").mkdir(parents=True)
        env = topology.env | _quiet(topology.server.api_url, machine / "home" / ".prefect")
        env |= {"HOME": str(machine / "home"), "TMPDIR": str(machine), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        out = machine / "report.json"
        argv = [sys.executable, __file__, "--worker", str(out), "--prefix", f"{prefix}-{name}"]
        argv += ["--runs", str(options.runs // 2), "--wave", str(options.wave), "--warm-up", str(options.warm_up)]
        argv += ["--every", str(options.every)] if options.every else []
        with open(machine / "worker.log", "wb") as log:
            process = subprocess.Popen(argv, env=env, cwd=machine, stdout=log, stderr=subprocess.STDOUT)
        stack.callback(stop, process)
        workers[name] = (process, out)
    for name, (process, out) in workers.items():
        if process.wait() != 0:
            said = (out.parent / "worker.log").read_text(errors="replace")
            raise RuntimeError(f"worker {name} exited {process.returncode}:\n{said[-4000:]}")
        print(f"worker {name}: {(out.parent / 'worker.log').read_text().splitlines()[-1]}", flush=True)
    reports = {f"worker {name}": _loaded(out.read_text()) for name, (_, out) in workers.items()}
    os.environ.update(topology.env | _quiet(topology.server.api_url, root / "operator"))
    both = Report(runs=options.runs, seconds=max(report.seconds for report in reports.values()))
    anyio.run(finish, both, prefix)
    server, database = topology.server.cpu()
    print(f"\nthe operator's prune of both workers' sessions:\n{both.left_text()}")
    print(f"CPU seconds of the Prefect server {server:.0f}, of PostgreSQL {database:.0f}")
    return reports


def _loaded(text: str) -> Report:
    data = json.loads(text)
    data["samples"] = [(done, values) for done, values in data["samples"]]
    return Report(**data)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--warm-up", type=float, default=0.1, help="share of the runs before the first sample")
    parser.add_argument("--every", type=int, default=None, help="runs between samples (default: ~50 samples)")
    parser.add_argument("--wave", type=int, default=1, help="runs gathered at a time (default: one after another)")
    parser.add_argument("--postgres", action="store_true", help="a PostgreSQL server instead of SQLite")
    parser.add_argument(
        "--topology", action="store_true", help="PostgreSQL + S3, the runs split over two worker processes"
    )
    parser.add_argument("--report", type=Path, default=None, help="write the reports there as JSON")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default=None, help=argparse.SUPPRESS)
    sys.exit(main(parser.parse_args()))
