"""The pytest plugin nexusflow ships, as a user's test suite meets it: a marked test records
its CLI's launches beside the test file, replays them in a later session with the binary
gone, and a drifted or unrecorded test fails with the pinned error. Each session is a pytest
of its own (the plugin is loaded as the entry point loads it, by module)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cli_fixtures import FAKE_CLI, envelope_answer, envelope_calls, styled

pytestmark = [pytest.mark.slow]

USER_TESTS = '''
import os
import re

import pytest

from nexusflow import CliStyles, Toolkit, Transport, create_cli_client, tool

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def ask(prompt):
    client = create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI)
    async with await Toolkit.load(tools=[add]) as toolkit:
        return await client.run(prompt, toolkit)


@pytest.mark.nexusflow_cassette
async def test_adds():
    result = await ask("What is 2+3?")
    assert result.status == "completed", result.error
    assert result.text == "It is 5."


@pytest.mark.nexusflow_cassette(path="cassettes/test_user/test_adds.json", mode="replay")
async def test_adds_otherwise():
    result = await ask("What is 2+4?")
    assert result.status == "completed", result.error


@pytest.mark.nexusflow_cassette
async def test_never_recorded(nexusflow_cassette):
    assert nexusflow_cassette.mode == "record"
'''


def pytest_session(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest", "-p", "nexusflow.testing.pytest_plugin", "-p", "anyio.pytest_plugin"]
    return subprocess.run(
        [*argv, "-p", "no:cacheprovider", "-q", "-rA", "--strict-markers", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **env},
    )


def test_a_marked_test_records_then_replays_without_the_binary(tmp_path, fake, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "test_user.py").write_text(USER_TESTS)
    binaries = tmp_path / "bin"
    binaries.mkdir()
    claude = binaries / "claude"
    shutil.copy(FAKE_CLI, claude)
    claude.chmod(claude.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{binaries}{os.pathsep}{os.environ['PATH']}")
    fake.script(
        styled("claude", envelope_calls({"name": "add", "arguments": {"a": 2, "b": 3}})),
        styled("claude", envelope_answer("It is 5.")),
    )

    recording = pytest_session(folder, "test_user.py::test_adds")
    assert recording.returncode == 0, recording.stdout[-4000:]
    cassette = folder / "cassettes" / "test_user" / "test_adds.json"
    assert [launch["turn"] for launch in json.loads(cassette.read_text())["launches"]] == [0, 1]
    assert len(fake.calls()) == 2

    claude.unlink()
    replaying = pytest_session(folder, "test_user.py", NEXUSFLOW_CASSETTE_MODE="replay")
    summary = re.findall(r"^(PASSED|FAILED|ERROR) test_user\.py::(\w+)", replaying.stdout, re.MULTILINE)
    outcomes = {test: outcome for outcome, test in summary}
    assert outcomes == {"test_adds": "PASSED", "test_adds_otherwise": "FAILED", "test_never_recorded": "ERROR"}, (
        replaying.stdout[-4000:]
    )
    drifted = f"cassette: {cassette} has no recording for turn 0; the nearest recording (turn 0) differs"
    assert drifted in replaying.stdout
    assert '-        "content": "What is 2+3?"' in replaying.stdout
    assert '+        "content": "What is 2+4?"' in replaying.stdout
    unrecorded = folder / "cassettes" / "test_user" / "test_never_recorded.json"
    assert f"cassette: {unrecorded} does not exist and the mode is replay" in replaying.stdout
    assert len(fake.calls()) == 2, "no launch while replaying"
