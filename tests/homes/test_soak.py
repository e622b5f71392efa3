"""The soak of ``benchmarks/soak.py`` at CI size.

The soak runs as a user runs it: a process of its own (so its memory, descriptors and threads
are its runs' alone, not a test worker's) with a SQLite server of its own (so the rows it
counts, and the sessions its prune forgets, are its runs' alone). It exits 1 when a measure
grows after the warm-up or its prune leaves anything of the runs behind. The samples it rests
on, which count the session server's rows: tests/server/operator/test_soak_samples.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paths import BENCHMARKS

RUNS = 200
"""The soak's size in CI (the benchmark's default is 1000)."""
WAVE = 6
"""Runs gathered at a time, one of each kind, as a scheduled job or a fan-out starts them: their
waits overlap (one after another, 200 took 370 s)."""
WARM_UP = 0.25
"""The share of runs before the first sample: RSS climbs over the first ~40 runs (each kind of
run's first runs import and build what they need), flat after."""


# 2026-12-07: 120 runs in 380 s on a quiet 2-core machine; 200 runs in 750 s, and in CI past
# 1150 s, beside the slow tier's other tests (load 5-8); its server's start and prune included
@pytest.mark.timeout(2200)
def test_a_soak_of_the_mix_grows_nothing_and_prune_leaves_nothing_of_it(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    # Not the closed API and the no-retry client that conftest gives a test without a server:
    # the soak starts a server of its own, and its clients retry as a user's do.
    env = {
        key: value for key, value in os.environ.items() if key not in ("PREFECT_API_URL", "PREFECT_CLIENT_MAX_RETRIES")
    }
    argv = [sys.executable, str(BENCHMARKS / "soak.py"), "--runs", str(RUNS), "--wave", str(WAVE)]
    argv += ["--warm-up", str(WARM_UP), "--report", str(report)]
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=2100)
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    (found,) = json.loads(report.read_text()).values()
    assert found["runs"] == RUNS and len(found["samples"]) >= 10, "sampled from the warm-up on"
    assert found["pruned"] >= RUNS, "every run's session (and its nested ones) was pruned"
