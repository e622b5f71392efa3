"""Fan-out on Prefect's task runners: ``client.map`` of ``--members`` runs (20) in a flow on
``ThreadPoolTaskRunner`` (the baseline: the flow's default) and on prefect-dask's
``DaskTaskRunner`` over a ``distributed.LocalCluster`` of 1 and of 2 worker processes.

A ``prefect server start`` on SQLite starts first (loopback, temp home), then both clusters
(``--threads`` threads a worker, the map's ``max_concurrency`` everywhere, so the three differ
only in where the members run); each runner does one batch first, not counted (a worker
imports Prefect and nexusflow on its first member). Then each repetition runs one batch on
each runner, the order rotating. A member is a 2-turn run: a tool call, then the answer, from
an in-process model that waits ``--model-seconds`` a turn (0: instant). Every batch's answers
are checked. Prints the median batch time and members/min per runner, and the best batch
time (a SQLite server under load answers 503 and Prefect's client backs off 2, 4, 8 s: one
batch then takes minutes), each as a ratio to the thread pool's, with the load average.

    python benchmarks/fanout_dask.py                      # 20 members, 3 repetitions: ~4 min
    python benchmarks/fanout_dask.py --repeats 1 --members 6
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import this_process_on_a_new_server

MODEL_SECONDS = float(os.environ.get("FANOUT_MODEL_SECONDS", "0"))


def model(request: Any) -> object:
    """Turn 0 calls ``note``, turn 1 answers ``done <prompt>``; a module function (pickled by
    value from ``__main__`` to the workers), waiting as a remote model would."""
    if MODEL_SECONDS:
        time.sleep(MODEL_SECONDS)
    prompt = next(message.content for message in request.messages if message.role == "user")
    if not any(message.role == "assistant" for message in request.messages):
        return {"tool_calls": [{"name": "note", "arguments": {"text": prompt}}]}
    return f"done {prompt}"


async def note(text: str) -> str:
    """Note a text."""
    return f"noted {text}"


def batch_flow(runner: Any, members: int, concurrency: int) -> Any:
    from prefect import flow

    from nexusflow import Toolkit, create_in_process_client, tool

    client = create_in_process_client(model)
    tools = Toolkit([tool(note)])

    @flow(name="fanout-bench", task_runner=runner, log_prints=False)
    async def batch(batch_id: str) -> list[str]:
        prompts = [f"topic {n}" for n in range(members)]
        results = await client.map(prompts, tools, max_concurrency=concurrency, session_id=batch_id)
        wrong = [r for r, p in zip(results, prompts, strict=True) if r.text != f"done {p}"]
        if wrong:
            raise RuntimeError(f"{len(wrong)} wrong answers, first: {wrong[0].status} {wrong[0].error}")
        return [r.text or "" for r in results]

    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="threads a Dask worker, and the map's max_concurrency")
    parser.add_argument("--model-seconds", type=float, default=0.0, help="each turn's wait in the model")
    args = parser.parse_args()
    os.environ["FANOUT_MODEL_SECONDS"] = str(args.model_seconds)  # the workers, spawned later, inherit it
    global MODEL_SECONDS
    MODEL_SECONDS = args.model_seconds

    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the workers too: they inherit it
    with ExitStack() as stack:
        server = this_process_on_a_new_server("nexusflow-fanout-", stack)
        print(f"server (SQLite) started in {server.started_in:.1f} s")
        import logging

        import dask
        import distributed
        from prefect.task_runners import ThreadPoolTaskRunner
        from prefect_dask import DaskTaskRunner

        logging.getLogger("distributed").setLevel(logging.WARNING)
        stack.enter_context(dask.config.set({"distributed.scheduler.worker-saturation": 1.0}))
        runners: dict[str, Any] = {"threads": ThreadPoolTaskRunner(max_workers=args.threads)}
        for workers in (1, 2):
            started = time.monotonic()
            cluster = stack.enter_context(
                distributed.LocalCluster(
                    processes=True, n_workers=workers, threads_per_worker=args.threads, dashboard_address=":0"
                )
            )
            print(f"LocalCluster of {workers} worker(s) started in {time.monotonic() - started:.1f} s")
            runners[f"dask-{workers}"] = DaskTaskRunner(address=cluster.scheduler_address)

        flows = {name: batch_flow(runner, args.members, args.threads) for name, runner in runners.items()}

        def one(name: str) -> float:
            started = time.monotonic()
            asyncio.run(flows[name](f"bench-{name}-{uuid.uuid4().hex[:8]}"))
            return time.monotonic() - started

        for name in flows:
            print(f"warm-up {name}: {one(name):.1f} s (not counted)")
        times: dict[str, list[float]] = {name: [] for name in flows}
        names = list(flows)
        print(f"load average at start: {os.getloadavg()[0]:.2f}")
        for repeat in range(args.repeats):
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for name in order:
                times[name].append(one(name))
                print(f"  rep {repeat + 1} {name}: {times[name][-1]:.1f} s")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")

        base = statistics.median(times["threads"])
        print(
            f"\n{args.members} members (2 turns, 1 tool call each, model {args.model_seconds:g} s a turn), "
            f"max_concurrency {args.threads}, {args.repeats} repetitions, median:"
        )
        best = min(times["threads"])
        print(f"{'runner':<22}{'batch s':>9}{'members/min':>13}{'vs threads':>12}{'best s':>8}{'vs threads':>12}")
        labels = {"threads": "ThreadPoolTaskRunner", "dask-1": "Dask, 1 worker", "dask-2": "Dask, 2 workers"}
        for name, measured in times.items():
            median = statistics.median(measured)
            rate = args.members * 60 / median
            print(
                f"{labels[name]:<22}{median:>9.1f}{rate:>13.0f}{base / median:>11.2f}x"
                f"{min(measured):>8.1f}{best / min(measured):>11.2f}x"
            )


if __name__ == "__main__":
    main()
