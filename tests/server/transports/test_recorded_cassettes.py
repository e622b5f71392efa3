"""The committed cassettes of the real one-shot CLIs: ``tests/cassettes/<cli>.json`` holds one
run of each (claude, codex, gemini, copilot, opencode, goose) recorded against the scripted
model server, a turn that calls our ``add`` tool, then the final answer. The fast tier replays
each with no binary on PATH (the ``offline`` fixture: no CLI to launch; the runs are still
flows on the session's server) and no model server, so a change to the envelope, a style's
argv or the parsing of a CLI's output is caught in seconds; the live tier still runs the
binaries and records them again (tests/live/test_live_cassettes.py).
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

import pytest

from nexusflow import CliStyles
from nexusflow.testing import Cassette, crash_at_every_step
from nexusflow.testing.agents import FAKE_KEY
from nexusflow.transports.cassette import Scrub
from nexusflow.transports.oneshot import envelope
from nexusflow.transports.oneshot.style import CliStyle, builtin_style

from helpers.cli_cassette import AGENT_HOME, IDS, TRANSCRIPT, ran, run, transcript
from helpers.prefect_api import task_runs
from helpers.processes import running_with
from live_agents import ONE_SHOT
from paths import CASSETTES, HELPERS

pytestmark = [pytest.mark.anyio]

USAGE = {
    CliStyles.CLAUDE: "tokens 20 in / 10 out · cost $0.00035",
    CliStyles.CODEX: "tokens 20 in / 10 out · cost $?",
    CliStyles.GEMINI: "tokens 20 in / 10 out · cost $?",
    CliStyles.COPILOT: "tokens ? in / ? out · cost $?",
    CliStyles.OPENCODE: "tokens 20 in / 10 out · cost $0",
    CliStyles.GOOSE: "tokens 20 in / 10 out · cost $?",
}
"""What each CLI's report reader finds in its recorded output: the scripted server counts 10
tokens in and 5 out a request; copilot's one-shot output states none."""


def replaying(style: CliStyles, tmp_path: Path) -> Cassette:
    return Cassette(CASSETTES / f"{ONE_SHOT[style]}.json", "replay", places={AGENT_HOME: tmp_path})


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No agent CLI on PATH: a replay that tried to launch one would fail."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("style", ONE_SHOT, ids=IDS)
async def test_the_committed_cassette_of_each_cli_replays_offline(style: CliStyles, tmp_path: Path) -> None:
    assert shutil.which(ONE_SHOT[style]) is None
    cassette = replaying(style, tmp_path)
    result = await run(style, ONE_SHOT[style], cassette)
    assert result.status == "completed", result.error
    assert result.text == "It is 5."
    assert ran == [(2, 3)], "the toolkit's tool really ran, once"
    assert transcript(result) == TRANSCRIPT
    assert result.metrics.turns == 2
    assert result.metrics.usage.shown() == USAGE[style], "the CLI's report is read as when it was recorded"
    assert cassette.unplayed() == [], "each recorded launch was played"
    names = sorted(task.name for task in await task_runs(result.flow_run_id, expected=3))
    assert names == ["tool-0-add", "turn-0", "turn-1"], "a replayed run is still a flow with its task runs"


def changed_argv(style: CliStyles) -> CliStyle:
    """The style without its second argument: what an edit to a style's argv looks like."""
    chosen = builtin_style(style)
    return chosen.model_copy(update={"args": [chosen.args[0], *chosen.args[2:]]})


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("style", [CliStyles.CODEX, CliStyles.GOOSE], ids=["codex", "goose"])
async def test_a_changed_style_argv_fails_the_replay_with_the_pinned_mismatch(style: CliStyles, tmp_path: Path) -> None:
    cassette = CASSETTES / f"{ONE_SHOT[style]}.json"
    result = await run(changed_argv(style), ONE_SHOT[style], replaying(style, tmp_path))
    assert result.status == "failed" and result.error_type == "CassetteMismatch"
    assert result.error is not None
    head, diff = result.error.split("\n", 1)
    assert head == f"cassette: {cassette} has no recording for turn 0; the nearest recording (turn 0) differs:"
    assert diff.startswith("--- recorded (turn 0)\n+++ asked (turn 0)\n@@ ")
    changed = [line for line in diff.splitlines()[2:] if line.startswith(("-", "+"))]
    assert changed == [f"-    {json.dumps(builtin_style(style).args[1])},"], diff
    assert ran == [], "no tool ran: the first turn already failed"


@pytest.mark.usefixtures("offline")
async def test_a_changed_envelope_prompt_fails_the_replay_of_every_cli(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(envelope, "PREAMBLE", envelope.PREAMBLE.replace("tool-calling agent", "tool-using agent"))
    for style, name in ONE_SHOT.items():
        result = await run(style, name, replaying(style, tmp_path))
        assert result.status == "failed" and result.error_type == "CassetteMismatch", (name, result.error)
        assert result.error is not None
        assert result.error.startswith(f"cassette: {CASSETTES / f'{name}.json'} has no recording for turn 0;")
        assert "tool-calling agent" in result.error and "tool-using agent" in result.error, result.error


SECRETS = re.compile(r"sk-[A-Za-z0-9_-]{8,}|ghp_|Bearer [A-Za-z0-9]")
MACHINE = re.compile(r"/(?:tmp|home|root|Users|work|var/folders)/|127\.0\.0\.1:\d+|localhost:\d+")
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\b1[6-9]\d{8}(?:\d{3})?\b")


@pytest.mark.parametrize("style", ONE_SHOT, ids=IDS)
def test_the_committed_cassettes_hold_no_secret_no_machine_path_and_no_timestamp(style: CliStyles) -> None:
    text = (CASSETTES / f"{ONE_SHOT[style]}.json").read_text()
    assert FAKE_KEY not in text
    assert SECRETS.findall(text) == []
    assert MACHINE.findall(text) == []
    assert TIMESTAMP.findall(text) == []
    assert len(text) < 40_000, "small enough to read in a review"


def test_the_times_a_cli_stamps_are_fixed_and_the_times_a_model_says_are_kept() -> None:
    said = json.dumps({"content": "due 2026-12-04T10:00:00Z", "created": 1796418068})
    output = (
        f'{{"created": 1796418068, "timestamp": "2026-12-04T21:00:51.800Z", "time": {{"start": 1796418061261}},'
        f' "echo": "<current_datetime>2026-12-04T21:02:24.656+00:00</current_datetime>", "text": {json.dumps(said)}}}'
        " limit reached|1733338800"
    )
    assert Scrub({}).safe(output) == (
        '{"created": 0, "timestamp": "<timestamp>", "time": {"start": 0},'
        f' "echo": "<current_datetime><timestamp></current_datetime>", "text": {json.dumps(said)}}}'
        " limit reached|1733338800"
    ), "the model's text and a quota's reset epoch are what the run reads: kept"


@pytest.mark.slow  # nine processes, one at a time: about a minute
@pytest.mark.timeout(600)
def test_a_replay_killed_at_every_step_resumes_from_the_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, offline: None
) -> None:
    """A replayed run is a durable run: killed (SIGKILL, whole group) at each step boundary and
    resumed in a new process with the same session and the same cassette, each finished step
    replays from the store, so no recorded launch is played twice and ``add`` runs once, and
    the resumed run prints what the uninterrupted one printed."""
    mark = f"NEXUSFLOW_TEST_REPLAY_CRASH={uuid.uuid4().hex}"
    monkeypatch.setenv(*mark.split("=", 1))
    logs = tmp_path / "logs"
    logs.mkdir()
    report = crash_at_every_step(HELPERS / "cassette_replay.py", "{session}", str(logs), concurrency=3)
    assert report.steps == ["turn-0", "tool-0 call 0", "turn-1"]
    assert report.tool_calls == {"add": 1}
    assert report.output == "completed 'It is 5.' ['add'] 4 tokens 20 in / 10 out · cost $0.00035\n"
    assert [boundary.replayed for boundary in report.boundaries] == [
        [],
        ["turn-0"],
        ["turn-0", "tool-0 call 0"],
        ["turn-0", "tool-0 call 0", "turn-1"],
    ]
    assert all(boundary.failure is None and boundary.in_flight_again == [] for boundary in report.boundaries)

    by_process = sorted(processes(log) for log in logs.glob("*.log"))
    whole = [["played turn-0", "add 2 3", "played turn-1"]]
    assert by_process == sorted(
        [
            whole,  # the uninterrupted run
            whole,  # killed before its first step: the resume ran it all
            [["played turn-0"], ["add 2 3", "played turn-1"]],  # killed after turn-0
            [["played turn-0", "add 2 3"], ["played turn-1"]],  # killed after add's call
            whole,  # killed after turn-1: the resume replayed it all, playing nothing
        ]
    ), "each launch played once and add ran once in each session, across the kill and its resume"
    assert running_with(mark) == [], "no process of a kill or a resume outlived it"


def processes(log: Path) -> list[list[str]]:
    """What each process of a session logged (``cassette_replay.py``), process by process."""
    said: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        pid, what = line.split(" ", 1)
        said.setdefault(pid, []).append(what)
    return list(said.values())
