"""The examples in examples/ keep working (the README's blocks: ``test_docs.py``); those with
a flow of their own run as a new user runs them, on the home's ``nexusflow server`` or embedded."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.homes import loud, new_user_environment, nexusflow_server, noise, served
from helpers.servers import migrated_home
from paths import EXAMPLES

PRINTS = dict(
    [
        ("quickstart.py", "completed 2 + 3 = 5"),
        ("compose.py", "- Prefect: three key facts, summarized.\n- MCP: three key facts, summarized."),
        (
            "triage.py",
            "paged: #42 Login fails on Safari\nOne urgent regression, one data bug, one cosmetic fix.\n"
            "#42 [urgent] Login fails on Safari\n#40 [normal] Export to CSV drops the last row\n"
            "#41 [later] Typo in the settings page\n",
        ),
        (
            "research_fanout.py",
            "- durable execution: the one thing that matters.\n- tool calling: the one thing that matters.\n"
            "- MCP: the one thing that matters.\n- ACP: the one thing that matters.\n"
            "- prompt caching: the one thing that matters.\n- rate limits: the one thing that matters.\n"
            "- evals: the one thing that matters.\n- sandboxing: the one thing that matters.\n"
            "- structured output: the one thing that matters.\n- agent handoffs: the one thing that matters.\n"
            "Synthesis of 10 findings, first: durable execution: the one thing that matters.\n",
        ),
        (
            "review_chain.py",
            "completed Our agents compose: one agent calls another as a tool, and a crash resumes both of them."
            " Nothing is paid for twice. (review: Lead with the benefit: nothing is paid for twice.)\n",
        ),
    ]
)
"""Each example, and what it prints."""

OWN_FLOW = ["compose.py", "research_fanout.py", "triage.py"]
"""The examples that run a ``@flow`` of their own, which starts Prefect's server for itself."""


@pytest.mark.parametrize(("script", "expected"), PRINTS.items())
@pytest.mark.slow
def test_example_runs(script, expected):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=300, env=os.environ.copy()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout


def run_as_a_new_user(script: str, env: dict[str, str]) -> str:
    """The example run as its docstring says; its stderr, after checking its stdout."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert PRINTS[script] in done.stdout
    assert noise(done.stdout + done.stderr) == [], loud(done.stdout + done.stderr)
    return done.stderr


def said(stderr: str) -> list[str]:
    return [line.split(" - ", 1)[1] for line in stderr.splitlines() if "| nexusflow.server - " in line]


@pytest.fixture(scope="module")
def served_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str], str]]:
    home = tmp_path_factory.mktemp("home")
    migrated_home(home)
    env = new_user_environment(home)
    with nexusflow_server(env, home.parent / "server.log") as server:
        yield home, env, served(server)


@pytest.mark.parametrize("script", OWN_FLOW)
@pytest.mark.slow
def test_an_example_with_its_own_flow_uses_the_homes_server_and_says_so_once(served_home, script):
    """It used to start a temporary server of its own beside the home's, logging a telemetry
    ERROR (a ``database is locked`` traceback on a first run) and naming no server."""
    home, env, url = served_home
    stderr = run_as_a_new_user(script, env)
    assert said(stderr) == [f"using the Prefect server that `nexusflow server` runs for {home}: {url}"], stderr
    assert "Starting temporary server" not in stderr


@pytest.mark.parametrize("script", OWN_FLOW)
@pytest.mark.slow
def test_an_example_with_its_own_flow_runs_embedded_quietly_on_a_fresh_home(tmp_path, script):
    stderr = run_as_a_new_user(script, new_user_environment(tmp_path))
    assert said(stderr) == [f"using an embedded Prefect server (a temporary server of this process) on {tmp_path}"]
