"""The soak of ``benchmarks/soak.py`` at CI size, and the samples it rests on.

The soak runs as a user runs it: a process of its own (so its memory, descriptors and threads
are its runs' alone, not a test worker's) with a SQLite server of its own (so the rows it
counts, and the sessions its prune forgets, are its runs' alone). It exits 1 when a measure
grows after the warm-up or its prune leaves anything of the runs behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # benchmarks/ is no package
from soak import MIB, THRESHOLDS, Report  # noqa: E402

RUNS = 200
"""The soak's size in CI (the benchmark's default is 1000)."""
WAVE = 6
"""Runs gathered at a time, one of each kind, as a scheduled job or a fan-out starts them: their
waits overlap (one after another, 200 took 370 s)."""
WARM_UP = 0.25
"""The share of runs before the first sample: RSS climbs over the first ~40 runs (each kind of
run's first runs import and build what they need), flat after."""

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(1200)  # ~340 s on a loaded 2-core machine, its server's start and the prune's 90 s included
def test_a_soak_of_the_mix_grows_nothing_and_prune_leaves_nothing_of_it(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    # Not the closed API and the no-retry client that conftest gives a test without a server:
    # the soak starts a server of its own, and its clients retry as a user's do.
    env = {
        key: value for key, value in os.environ.items() if key not in ("PREFECT_API_URL", "PREFECT_CLIENT_MAX_RETRIES")
    }
    argv = [sys.executable, str(BENCHMARKS / "soak.py"), "--runs", str(RUNS), "--wave", str(WAVE)]
    argv += ["--warm-up", str(WARM_UP), "--report", str(report)]
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1150)
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    (found,) = json.loads(report.read_text()).values()
    assert found["runs"] == RUNS and len(found["samples"]) >= 10, "sampled from the warm-up on"
    assert found["pruned"] >= RUNS, "every run's session (and its nested ones) was pruned"


@pytest.mark.usefixtures("prefect_server")
def test_the_soak_s_samples_see_each_kind_of_leak_and_its_slope_fails(tmp_path: Path) -> None:
    """One more of each thing the soak counts (a 5 MiB buffer, an open file, a thread, a child
    process, a temp file, a ``nexusflow-*`` limit, a block, a variable) moves its sample, and a
    rise of one a run is a slope the report calls growing; AnyIO's idle worker threads, a
    bounded pool that grows and shrinks with the waves, do not. The samples are taken in a
    process of their own, as the soak takes them: in a test worker, other tests' threads and
    files came and went between two samples (a thread ended: 9 threads against 10)."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "helpers" / "soak_probe.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    before, pooled, after = (json.loads(line) for line in done.stdout.splitlines()[-3:])
    assert pooled["threads"] == before["threads"], "idle AnyIO workers are not counted"
    assert after["rss"] - before["rss"] >= 4 * MIB
    for name in THRESHOLDS:
        if name != "rss":
            assert after[name] - before[name] >= 1, f"{name}: {before[name]} -> {after[name]}"
    report = Report(runs=3, seconds=0.0)
    report.samples = [(0, before), (1, after)]
    assert set(report.growing()) == set(THRESHOLDS)
