"""The soak's verdict on RSS (benchmarks/soak.py): one step of CPython's 1 MiB arenas over a
short window is flat, a steady leak of the same size is not, and a long soak keeps its
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
