"""Every code block of the documentation (README.md and the site's pages under docs/) is run
by a test, or says on its page why it cannot run on its own (``<!-- fragment: why -->``) and
is checked another way. The blocks run here run as a new user runs them: each copied into a
file of its own folder and run as a program, with no API URL and no opt-out of telemetry, in
the one ``PREFECT_HOME`` a reader has. The first run (``first-run``, the README's) runs on a
fresh home and starts Prefect's embedded server for itself; then, as the docs tell a reader
to do after a first run, ``nexusflow server`` is started for that home, and every other block
runs on it, page after page in the docs' order (README.md, then mkdocs.yml's nav), on the
home the blocks before it left. Each must print what it says it prints and nothing noisy
(``Traceback``, ``ERROR``, ``WARNING``) but what it causes on purpose (``ON_PURPOSE``)."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.docs import REPO, Block, blocks
from helpers.homes import new_user_environment, nexusflow_server, noise, served

TIMEOUT = 300
"""Seconds for every block together, the first run's embedded server and the server included."""

RUN_HERE: dict[str, str] = {
    "first-run": "completed 2 + 3 = 5\n",
    "getting-started": "completed 2 + 3 = 5\n",
    "cli-client": "",
    "getting-started-cli": "",
    "acp-clients": "",
    "ask-a-person": "",
    "tool-policies": "",
    "model-retries": "completed 1 2\n",
    "budgets": "failed budget: session budget-demo spent $0.03 of $0.03 (max_cost_usd)\n",
    "quota": "completed answered by the backup\n",
    "typed-output": "2 1\n",
    "compose-as-tool": 'revised after {"approved":true,"advice":"Shorter."}\n',
    "compose-map": (
        "facts-1.0 completed topic='Prefect' letters=7\n"
        "facts-1.1 failed model: generate raised RuntimeError: no such topic\n"
        "facts-1.2 completed topic='MCP' letters=3\n"
    ),
    "compose-prefect-map": "['Summarize Prefect.', 'Summarize MCP.', 'Summarize ACP.']\n",
    "sessions": "pruned 0 sessions\n",
}
"""Blocks run here, and what each prints."""

FIRST = "first-run"
"""The block a newcomer runs first, on a fresh home."""

ON_PURPOSE: dict[str, list[str]] = {
    "model-retries": [r"model: transient error, retry 1 of 2"],
    "compose-map": [r"no such topic", r"^Traceback \(most recent call last\):$"],
    "quota": [r"quota: my-api limit reached \(reset time unknown\): monthly tokens used up; the turn goes to"],
}
"""The noise a block causes on purpose: a retried model error, a member's model that raises.
A spent budget is an expected failure: one line, the block's own print."""

ELSEWHERE = {
    "main-job": ".ci/run",
    "tests": ".ci/run",
    "serve-job": "tests/test_deployments.py",
    "approval-automation": "tests/test_events.py",
    "acp-replay-resume": "tests/test_acp_cassettes.py",
}
"""Blocks another test runs: the file that reads them by their marker."""

COPIES = {"the README's main job": "main-job", "the README's tests command": "tests"}
"""A page's copy of a README block that .ci/run runs (what its fragment says): the same command."""


def test_every_block_is_run_by_a_test_or_says_why_not():
    unaccounted = []
    for block in blocks():
        if block.marker in RUN_HERE:
            continue
        if block.language == "mermaid":  # a figure, rendered by the site's build (mkdocs.yml)
            continue
        if block.marker in ELSEWHERE:
            assert block.marker in (REPO / ELSEWHERE[block.marker]).read_text(), (
                f"{ELSEWHERE[block.marker]} does not read the block {block.marker}"
            )
            continue
        if block.marker.startswith("fragment: "):
            for named in re.findall(r"tests/[\w/]+\.py", block.marker):
                assert (REPO / named).exists(), f"{block.where}: the fragment names {named}, which is not there"
            if block.language == "python":  # it is Python all the same
                compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            continue
        unaccounted.append(f"{block.where} ({block.language}) is neither run nor a fragment saying why")
    assert not unaccounted, "\n".join(unaccounted)
    markers = [
        block.marker for block in blocks() if block.language != "mermaid" and not block.marker.startswith("fragment: ")
    ]
    assert len(markers) == len(set(markers)), f"a marker names two blocks: {sorted(markers)}"
    assert set(RUN_HERE) <= set(markers) and set(ELSEWHERE) <= set(markers), "a block this test runs has left the docs"
    readme = {block.marker: block.code for block in blocks() if block.path == "README.md"}
    assert {"main-job", "tests", FIRST} <= set(readme), ".ci/run and a newcomer read these in README.md"
    for block in blocks():
        for words, marker in COPIES.items():
            if words in block.marker:
                assert block.code == readme[marker], f"{block.where} is not the README's {marker} any more"


@dataclass
class Ran:
    code: int
    out: str
    err: str


def run_block(block: Block, folder: Path, home: Path, deadline: float) -> Ran:
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
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
    return Ran(process.returncode, out, err)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Ran]]:
    """Every block of RUN_HERE, one after another as a reader runs them: the first run on a
    fresh home (its own embedded server), then ``nexusflow server`` for that home, as the
    docs say to start after a first run, and the others on it in the docs' order (a block
    that depends on a fresh home, or leaves the home unfit for the next, fails here). The
    server is one process group, killed whole at the end whatever happens: every block then
    costs its own imports and run, not an embedded server's start (some 10 s each here)."""
    home = tmp_path_factory.mktemp("home")
    order = [block for block in blocks() if block.marker in RUN_HERE]
    first = next(block for block in order if block.marker == FIRST)
    deadline = time.monotonic() + TIMEOUT
    outcomes = {FIRST: run_block(first, tmp_path_factory.mktemp(FIRST), home, deadline)}
    with nexusflow_server(new_user_environment(home), tmp_path_factory.mktemp("server") / "server.log") as server:
        served(server)
        for block in order:
            if block.marker != FIRST:
                folder = tmp_path_factory.mktemp(block.marker)
                outcomes[block.marker] = run_block(block, folder, home, deadline)
    yield outcomes


@pytest.mark.parametrize("marker", sorted(RUN_HERE))
@pytest.mark.slow
@pytest.mark.xdist_group("heavy")
@pytest.mark.timeout(TIMEOUT + 60)
def test_a_block_runs_as_copied_and_prints_what_it_says_quietly(ran, marker):
    outcome = ran[marker]
    assert outcome.code == 0, outcome.err[-3000:]
    assert outcome.out == RUN_HERE[marker]
    code = next(block.code for block in blocks() if block.marker == marker)
    assert all(f"# {line}" in code for line in outcome.out.splitlines()), "the block says what it prints"
    unasked = [
        line
        for line in noise(outcome.out + outcome.err)
        if not any(re.search(pattern, line) for pattern in ON_PURPOSE.get(marker, []))
    ]
    assert unasked == [], outcome.err[-3000:]


def synopsis_commands() -> list[list[str]]:
    """The commands of the command's synopsis: ``nexusflow run``, ``nexusflow styles list``..."""
    synopsis = next(block for block in blocks() if "synopsis" in block.marker)
    commands = []
    for line in synopsis.code.splitlines():
        words = line.split()
        if words[:1] == ["nexusflow"] and words[1] != "--help":
            command = [words[1]] + ([words[2]] if words[1] in ("styles", "alerts") else [])
            if command not in commands:
                commands.append(command)
    return commands


HELPS = """
import contextlib, io, json, sys
from nexusflow.command import main

answers = {}
for command in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*command, "--help"])
    answers[" ".join(command)] = [code, out.getvalue()]
print(json.dumps(answers))
"""
"""Every command's ``--help`` in one process: the command's own ``main``, as ``nexusflow`` calls
it, without paying Prefect's import once per command (14 processes, some 25 s of CPU)."""


@pytest.mark.slow
def test_each_command_of_the_synopsis_answers_help():
    commands = synopsis_commands()
    assert ["run"] in commands and ["styles", "verify"] in commands
    done = subprocess.run(
        [sys.executable, "-c", HELPS, json.dumps(commands)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout)
    assert sorted(answers) == sorted(" ".join(command) for command in commands)
    for name, (code, out) in answers.items():
        assert code == 0, f"nexusflow {name} --help exited {code}: {out[-2000:]}"
        assert f"Usage: nexusflow {name}" in out, out[:500]


TYPED = {"typed-output": "result.output", "compose-as-tool": None}
"""Blocks a type checker reads as users' code is read, and the expression whose type it must
know (the client's output type reaching ``RunResult.output``)."""


@pytest.mark.parametrize("marker", sorted(TYPED))
@pytest.mark.slow
def test_a_typed_block_passes_mypy_strict(marker, tmp_path):
    """With the cache ``.ci/run`` fills when it checks the package (``mypy nexusflow``)."""
    code = next(block.code for block in blocks() if block.marker == marker)
    revealed = TYPED[marker]
    (tmp_path / "block.py").write_text(code + (f"\nreveal_type({revealed})\n" if revealed else ""))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(REPO / ".mypy_cache"),
            str(tmp_path / "block.py"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    if revealed:
        assert 'Revealed type is "block.Triage"' in done.stdout, "the client's output type reaches the result"
