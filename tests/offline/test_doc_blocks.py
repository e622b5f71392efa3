"""Every code block of the documentation (README.md and the site's pages under docs/) is run
by a test, or says on its page why it cannot run on its own (``<!-- fragment: why -->``) and
is checked another way; and what can be checked of the blocks without running them as a
reader does: each command of the synopsis answers ``--help``, and the typed blocks pass
``mypy --strict``. The blocks that run on their own run as a reader runs them, on a home of
their own, in tests/homes/test_docs.py."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest

from helpers.docs import FIRST_RUN, REPO, RUN_AS_COPIED, blocks

ELSEWHERE = {
    "main-job": ".ci/run",
    "tests": ".ci/run",
    "serve-job": "tests/server/run/test_deployments.py",
    "approval-automation": "tests/server/run/test_events.py",
    "acp-replay-resume": "tests/server/transports/test_acp_cassettes.py",
}
"""Blocks another test runs: the file that reads them by their marker."""

COPIES = {"the README's main job": "main-job", "the README's tests command": "tests"}
"""A page's copy of a README block that .ci/run runs (what its fragment says): the same command."""


def test_every_block_is_run_by_a_test_or_says_why_not():
    unaccounted = []
    for block in blocks():
        if block.marker in RUN_AS_COPIED:
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
    assert set(RUN_AS_COPIED) <= set(markers) and set(ELSEWHERE) <= set(markers), (
        "a block this test runs has left the docs"
    )
    readme = {block.marker: block.code for block in blocks() if block.path == "README.md"}
    assert {"main-job", "tests", FIRST_RUN} <= set(readme), ".ci/run and a newcomer read these in README.md"
    for block in blocks():
        for words, marker in COPIES.items():
            if words in block.marker:
                assert block.code == readme[marker], f"{block.where} is not the README's {marker} any more"


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
