"""The soak of ``benchmarks/soak.py`` at CI size: runs of the realistic mix (tools, a pending
run answered, typed output, a sub-agent, a fan-out, an ACP session) in this process, on the
session's Prefect server. After the warm-up nothing grows (RSS, file descriptors, threads,
child processes, temporary files, the server's concurrency limits, blocks and variables)
beyond the benchmark's thresholds, and the prune of the finished sessions leaves nothing of
them behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from soak import soak

RUNS = 200
"""The soak's size in CI (the benchmark's default is 1000); 2-3 s a run on 2 shared cores."""

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(6 * RUNS),
    pytest.mark.xdist_group("heavy"),
    pytest.mark.usefixtures("prefect_server"),
]


async def test_a_soak_of_the_mix_grows_nothing_and_prune_leaves_nothing_of_it(tmp_path: Path) -> None:
    report = await soak(RUNS, tmp_path)
    print(report.text())
    assert report.growing() == [], report.text()
    assert report.leftovers() == {}, report.text()
    assert report.pruned >= RUNS, "every run's session (and its nested ones) was pruned"
