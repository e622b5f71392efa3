"""The samples the soak of ``benchmarks/soak.py`` rests on (its run at CI size:
tests/homes/test_soak.py): each kind of leak it counts moves its sample, the session server's
blocks, variables and limits among them, and a rise of one a run is a slope its report fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paths import BENCHMARKS, HELPERS

sys.path.insert(0, str(BENCHMARKS))  # benchmarks/ is no package
from soak import MIB, THRESHOLDS, Report

pytestmark = [pytest.mark.slow]


def test_the_soak_s_samples_see_each_kind_of_leak_and_its_slope_fails(tmp_path: Path) -> None:
    """One more of each thing the soak counts (a 5 MiB buffer, an open file, a thread, a child
    process, a temp file, a ``nexusflow-*`` limit, a block, a variable) moves its sample, and a
    rise of one a run is a slope the report calls growing; AnyIO's idle worker threads, a
    bounded pool that grows and shrinks with the waves, do not. The samples are taken in a
    process of their own, as the soak takes them: in a test worker, other tests' threads and
    files came and went between two samples (a thread ended: 9 threads against 10)."""
    done = subprocess.run(
        [sys.executable, str(HELPERS / "soak_probe.py"), str(tmp_path)],
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
    # The probe's one more of each, kept by each of four runs: one step a run is no wander.
    rise = {name: after[name] - before[name] for name in before}
    report = Report(runs=4, seconds=0.0)
    report.samples = [(run, {name: before[name] + run * rise[name] for name in before}) for run in range(5)]
    assert set(report.growing()) == set(THRESHOLDS)
