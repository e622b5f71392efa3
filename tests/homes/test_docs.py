"""The code blocks of the documentation (README.md and the site's pages under docs/) that run
on their own, run as a new user runs them: each copied into a file of its own folder and run
as a program, with no API URL and no opt-out of telemetry, in the one ``PREFECT_HOME`` a
reader has. The first run (``first-run``, the README's) runs on a fresh home and starts
Prefect's embedded server for itself; then, as the docs tell a reader to do after a first
run, ``nexusflow server`` is started for that home, and every other block runs on it, page
after page in the docs' order (README.md, then mkdocs.yml's nav), on the home the blocks
before it left. Each must print what it says it prints (``RUN_AS_COPIED``) and nothing noisy
(``Traceback``, ``ERROR``, ``WARNING``) but what it causes on purpose (``ON_PURPOSE``). That
every other block is run by another test or says why not, and the checks that need no home,
are in tests/offline/test_doc_blocks.py."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.docs import FIRST_RUN, RUN_AS_COPIED, Block, blocks
from helpers.homes import new_user_environment, nexusflow_server, noise, served

TIMEOUT = 150
"""Seconds for one block, its imports and its run, the first run's embedded server included: a
block, not the blocks together, so that a slow machine slows each and a hang names its block
(CI, 2026-12-06: the 15 blocks took over 300 s together, 136 s here)."""

ON_PURPOSE: dict[str, list[str]] = {
    "model-retries": [r"model: transient error, retry 1 of 2"],
    "compose-map": [r"no such topic", r"^Traceback \(most recent call last\):$"],
    "quota": [r"quota: my-api limit reached \(reset time unknown\): monthly tokens used up; the turn goes to"],
}
"""The noise a block causes on purpose: a retried model error, a member's model that raises.
A spent budget is an expected failure: one line, the block's own print."""


@dataclass
class Ran:
    code: int
    out: str
    err: str


def run_block(block: Block, folder: Path, home: Path) -> Ran:
    """One block as a reader runs it, in a process group of its own, killed whole whatever
    happens: a block stopped alone would leave a server it started running."""
    (folder / "snippet.py").write_text(block.code)
    process = subprocess.Popen(
        [sys.executable, "snippet.py"],
        cwd=folder,
        env=new_user_environment(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        # A block's process that has exited may leave a child (a server it started)
        # holding its pipes open: its group goes once the block has exited.
        try:
            process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            late = f"\n(killed: still running after {TIMEOUT} s)"
        else:
            late = ""
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
    return Ran(process.returncode, out, err + late)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Ran]]:
    """Every block of RUN_AS_COPIED, one after another as a reader runs them: the first run on a
    fresh home (its own embedded server), then ``nexusflow server`` for that home, as the
    docs say to start after a first run, and the others on it in the docs' order (a block
    that depends on a fresh home, or leaves the home unfit for the next, fails here). The
    server is one process group, killed whole at the end whatever happens: every block then
    costs its own imports and run, not an embedded server's start (some 10 s each here)."""
    home = tmp_path_factory.mktemp("home")
    order = [block for block in blocks() if block.marker in RUN_AS_COPIED]
    first = next(block for block in order if block.marker == FIRST_RUN)
    outcomes = {FIRST_RUN: run_block(first, tmp_path_factory.mktemp(FIRST_RUN), home)}
    with nexusflow_server(new_user_environment(home), tmp_path_factory.mktemp("server") / "server.log") as server:
        served(server)
        for block in order:
            if block.marker != FIRST_RUN:
                folder = tmp_path_factory.mktemp(block.marker)
                outcomes[block.marker] = run_block(block, folder, home)
    yield outcomes


@pytest.mark.parametrize("marker", sorted(RUN_AS_COPIED))
@pytest.mark.xdist_group("heavy")
@pytest.mark.timeout(TIMEOUT * len(RUN_AS_COPIED) + 120)
def test_a_block_runs_as_copied_and_prints_what_it_says_quietly(ran, marker):
    outcome = ran[marker]
    assert outcome.code == 0, outcome.err[-3000:]
    assert outcome.out == RUN_AS_COPIED[marker]
    code = next(block.code for block in blocks() if block.marker == marker)
    assert all(f"# {line}" in code for line in outcome.out.splitlines()), "the block says what it prints"
    unasked = [
        line
        for line in noise(outcome.out + outcome.err)
        if not any(re.search(pattern, line) for pattern in ON_PURPOSE.get(marker, []))
    ]
    assert unasked == [], outcome.err[-3000:]
