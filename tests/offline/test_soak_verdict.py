"""The soak's verdict (benchmarks/soak.py) on RSS and on the locks it counts: one step of
CPython's 1 MiB arenas over a short window is flat, a steady leak of the same size is not, and a long soak keeps its
threshold of 1 MiB per 100 runs. CI's soak read one such step as growth (+1.28 MiB / 100 runs
over 146 sampled runs, every other sample flat)."""

from __future__ import annotations

import sys

from paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))  # benchmarks/ is no package
from soak import MIB, THRESHOLDS, Report


def _report(rss: list[float], every: int = 6, first: int = 54) -> Report:
    report = Report(runs=first + every * len(rss), seconds=0.0)
    others = dict.fromkeys(THRESHOLDS, 0.0)
    report.samples = [(first + every * i, {**others, "rss": value}) for i, value in enumerate(rss)]
    return report


def test_one_arena_step_in_a_short_soak_is_flat() -> None:
    stepped = [137.6 * MIB] * 10 + [138.7 * MIB] * 15  # the step of 1.1 MiB at run 114, 144 runs sampled
    assert _report(stepped).slope("rss") > THRESHOLDS["rss"].per_100, "the old verdict: growing"
    assert _report(stepped).growing() == []


def test_a_steady_leak_in_a_short_soak_grows() -> None:
    leaking = [137.6 * MIB + i * 6 * 15 * 1024 for i in range(25)]  # 15 KiB a run
    assert _report(leaking).growing() == ["rss"]


def test_a_long_soak_keeps_one_mib_per_hundred_runs() -> None:
    leaking = [137.6 * MIB + i * 6 * 11 * 1024 for i in range(150)]  # 11 KiB a run over 894 runs
    assert _report(leaking).growing() == ["rss"]


def _limits(counts: list[float], every: int = 6, first: int = 54) -> Report:
    report = Report(runs=first + every * len(counts), seconds=0.0)
    others = dict.fromkeys(THRESHOLDS, 0.0)
    report.samples = [(first + every * i, {**others, "concurrency limits": n}) for i, n in enumerate(counts)]
    return report


def test_locks_let_go_a_moment_late_are_flat_and_a_lock_kept_every_few_runs_grows() -> None:
    """CI's soak of 8437e82, as sampled: the count of locks, read while runs went on, wandered
    between 0 and 4 (its first and last samples 1) and read +0.59 rows / 100 runs against 0.5."""
    wandering = [1, 0, 0, 3, 1, 1, 2, 1, 1, 0, 1, 0, 0, 1, 1, 3, 4, 2, 3, 1, 1, 2, 2, 1, 1]
    assert _limits([float(n) for n in wandering]).slope("concurrency limits") > 0.5, "the old verdict: growing"
    assert _limits([float(n) for n in wandering]).growing() == []
    kept = [1.0 + i // 2 for i in range(25)]  # one lock left every 12 runs
    assert _limits(kept).growing() == ["concurrency limits"]
