"""The soak of ``benchmarks/soak.py`` at CI size: runs of the realistic mix (tools, a pending
run answered, typed output, a sub-agent, a fan-out, an ACP session) in this process, on the
session's Prefect server. After the warm-up nothing grows (RSS, file descriptors, threads,
child processes, temporary files, the server's concurrency limits, blocks and variables)
beyond the benchmark's thresholds, and the prune of the finished sessions leaves nothing of
them behind."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from soak import MIB, THRESHOLDS, Report, _process_tree, sample, soak

RUNS = 200
"""The soak's size in CI (the benchmark's default is 1000)."""
WAVE = 6
"""Runs gathered at a time, one of each kind, as a scheduled job or a fan-out starts them:
their waits overlap, so the soak is bound by CPU (~1.1 CPU-seconds a run, the server's
included, on 2 loaded cores) rather than by the waits (one after another: 370 s for 200)."""
WARM_UP = 0.25
"""The share of runs before the first sample: RSS climbs over the first ~40 runs (each kind
of run's first runs import and build what they need), flat after."""

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(6 * RUNS),
    pytest.mark.usefixtures("prefect_server"),
]


async def test_a_soak_of_the_mix_grows_nothing_and_prune_leaves_nothing_of_it(tmp_path: Path) -> None:
    report = await soak(RUNS, tmp_path, warm_up=WARM_UP, wave=WAVE)
    print(report.text())
    assert report.growing() == [], report.text()
    assert report.leftovers() == {}, report.text()
    assert report.kept == [], "no result record Prefect persisted outside nexusflow/, which prune cannot find"
    assert report.pruned >= RUNS, "every run's session (and its nested ones) was pruned"


async def test_the_soak_s_samples_see_each_kind_of_leak_and_its_slope_fails(tmp_path: Path) -> None:
    """One more of each thing the soak counts (a 5 MiB buffer, an open file, a thread, a
    child process, a temp file, a ``nexusflow-*`` limit, a block, a variable) moves its
    sample; a rise of one a run is a slope the report calls growing."""
    from prefect.blocks.system import Secret
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.variables import Variable

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    skip = set(_process_tree().get(os.getpid(), []))
    before = await sample(tmp, skip)
    buffer = bytearray(os.urandom(5 * MIB))
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tmp / "left.txt").write_text("x")
    async with get_client() as client:
        limit = await client.create_global_concurrency_limit(
            GlobalConcurrencyLimitCreate(name="nexusflow-soak-probe", limit=1)
        )
        block = await Secret(value="x").asave("soak-probe", overwrite=True)
        await Variable.aset("soak_probe", 1, overwrite=True)
        try:
            with open(tmp_path / "open.txt", "w"):
                after = await sample(tmp, skip)
        finally:
            release.set()
            thread.join()
            child.kill()
            child.wait()
            await client.delete_global_concurrency_limit_by_name("nexusflow-soak-probe")
            await client.delete_block_document(block)
            await Variable.aunset("soak_probe")
    assert limit and buffer
    assert after["rss"] - before["rss"] >= 4 * MIB
    for name in THRESHOLDS:
        if name != "rss":
            assert after[name] - before[name] >= 1, f"{name}: {before[name]} -> {after[name]}"
    report = Report(runs=3, seconds=0.0)
    report.samples = [(0, before), (1, after)]
    assert set(report.growing()) == set(THRESHOLDS)
