"""Nothing behind after kill -9, the launches' side: a run SIGKILLed while its CLI answers
leaves the CLI (and its child) running and its scratch folder, and the next nexusflow process
on the machine reaps both. The embedded server's side, which needs a home of its own:
tests/homes/test_server_reap.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_fixtures import FakeCli, alive, styled

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow, pytest.mark.xdist_group("heavy")]


KILLED_RUN = """
import sys
from nexusflow import CliStyles, Transport, create_cli_client
client = create_cli_client(CliStyles.CLAUDE, command=sys.argv[1], transport=Transport.CLI, model="m", timeout=900)
client.run_sync("go", session_id=sys.argv[2])
"""


def test_a_cli_and_its_scratch_folder_left_by_a_killed_run_are_reaped_by_the_next_nexusflow_process(
    tmp_path: Path, fake: FakeCli, session_id: str
) -> None:
    """A run is SIGKILLed while its CLI answers (a ten-minute turn, the CLI with a grandchild
    of its own): the CLI goes on, and its scratch folder stays. The next nexusflow process on
    the machine (here ``nexusflow sessions``) kills both and removes the folder. On d56091b
    they stayed until the CLI's turn ended, and the folder for good."""
    temporary = tmp_path / "tmp"  # the runs' temporary folder: scratch folders and notes, apart from other tests'
    temporary.mkdir()
    fake.script({"sleep": 600, "child": True, **styled("claude", "late")})
    env = {**os.environ, "TMPDIR": str(temporary), "FAKE_CLI_DIR": str(fake.root)}
    run = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, fake.command, session_id],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # only for the clean-up: the kill below is of its process alone
    )
    try:
        deadline = time.monotonic() + 120
        while not (fake.calls() and fake.children()):
            assert run.poll() is None and time.monotonic() < deadline, "the CLI never started"
            time.sleep(0.2)
        cli, grandchild = fake.calls()[0]["pid"], fake.children()[0]
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
        time.sleep(1)
        assert alive(cli) and alive(grandchild), "the kill alone leaves the CLI running"
        assert [path.name[:14] for path in temporary.glob("nexusflow-cli-*")] == ["nexusflow-cli-"]
        listed = subprocess.run(
            [sys.executable, "-m", "nexusflow", "sessions"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert listed.returncode == 0, listed.stderr[-2000:]
        deadline = time.monotonic() + 10
        while (alive(cli) or alive(grandchild)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(cli) and not alive(grandchild), "the next nexusflow process reaped the CLI"
        assert not list(temporary.glob("nexusflow-cli-*")), "and its scratch folder"
        assert not list(temporary.glob("nexusflow-launches-*")), "and its note, whose folder goes once empty"
    finally:
        for pid in [*(call["pid"] for call in fake.calls()), *fake.children()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
