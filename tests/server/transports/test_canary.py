"""The canary for CLI drift: ``styles verify`` quiet and leaving no session, and as a flow
(``nexusflow.job:styles_canary``) that fails naming the CLI, its version and the failed check.
The CLI is ``helpers/scripted_claude.py``, a stand-in for Claude Code talking to the scripted
model server; its drifted twin, a release that would no longer carry the model's words in its
error, stands for the drift the canary is for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nexusflow import list_sessions

from helpers.homes import loud, noise
from paths import HELPERS

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.xdist_group("styles-canary"),  # one worker: no other test's verify session meanwhile
]

SCRIPTED_CLAUDE = HELPERS / "scripted_claude.py"
DRIFTED = "2.9.0 (Claude Code)"


def cli(folder: Path, name: str, **env: str) -> Path:
    """An executable ``name`` running the scripted claude with ``env``."""
    path = folder / name
    variables = " ".join(f"{key}='{value}'" for key, value in env.items())
    path.write_text(f'#!/bin/sh\n{variables} exec "{sys.executable}" "{SCRIPTED_CLAUDE}" "$@"\n')
    path.chmod(0o755)
    return path


async def verify_sessions() -> list[str]:
    return [info.session_id for info in await list_sessions() if info.session_id.startswith("verify-")]


@pytest.mark.slow
async def test_styles_verify_passes_quietly_and_leaves_no_session(tmp_path):
    """Its deliberate model error used to print a 30-line traceback and 4 ERROR lines while
    every check passed, and left ``verify-*`` sessions (2 of 5 failed)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nexusflow",
            "styles",
            "verify",
            "--style",
            "claude",
            "--command",
            cli(tmp_path, "claude"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = [line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(report) == 5 and all(line.startswith("PASS") for line in report), done.stdout
    assert "scripted failure: bad request" in report[-1]
    assert noise(done.stdout + done.stderr) == [], loud(done.stdout + done.stderr)
    assert await verify_sessions() == []


@pytest.mark.slow
async def test_the_canary_flow_completes_for_a_cli_that_passes(tmp_path):
    from nexusflow.job import styles_canary

    state = await styles_canary(style="claude", command=str(cli(tmp_path, "claude")), return_state=True)
    assert state.is_completed(), state.message
    lines = await state.aresult()
    assert len(lines) == 5 and all(line.startswith("PASS") for line in lines), lines
    assert await verify_sessions() == []


@pytest.mark.slow
async def test_the_canary_flow_fails_naming_the_cli_its_version_and_the_failed_check(tmp_path):
    from nexusflow.job import styles_canary

    command = cli(tmp_path, "claude", SCRIPTED_CLAUDE_DRIFT="1", SCRIPTED_CLAUDE_VERSION=DRIFTED)
    state = await styles_canary(style="claude", command=str(command), return_state=True)
    assert state.is_failed()
    assert (
        f"styles canary: claude CLI {command} ({DRIFTED}) failed a model error fails the turn, with the model's"
        " message: failed: cli: exit 1: API Error: 400 [claude-code:unrecognized_model]"
    ) in state.message
    assert await verify_sessions() == []
