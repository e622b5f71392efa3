"""Cassettes at the one-shot transport's boundary: a run of a real CLI process (the fake CLI,
installed as ``claude`` on PATH) is recorded, then replayed with the binary gone; drift
fails with the pinned error and a diff; nothing secret or machine-bound reaches the file."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nexusflow import CassetteError, CassetteMismatch, CliStyles, Toolkit, Transport, create_cli_client, tool
from nexusflow.testing import Cassette
from nexusflow.transports.cassette import Scrub

from cli_fixtures import FakeCli, envelope_answer, envelope_calls, styled
from helpers.prefect_api import task_runs
from paths import REPO

pytestmark = [pytest.mark.anyio]

ran: list[tuple[int, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append((a, b))
    return a + b


def script_two_turns(fake: FakeCli) -> None:
    """Turn 0 calls add (the reply names no call id: the run makes a random one), turn 1 answers."""
    fake.script(
        styled("claude", envelope_calls({"name": "add", "arguments": {"a": 2, "b": 3}})),
        styled("claude", envelope_answer("It is 5.")),
    )


def client(cassette: Cassette | str | Path):
    return create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.AUTO, cassette=cassette)


def transcript(messages) -> list[tuple[str, str | None, list[str]]]:
    return [
        (m.role, getattr(m, "content", None), [c.name for c in getattr(m, "tool_calls", None) or []]) for m in messages
    ]


@pytest.mark.slow  # two runs, the first launching the CLI twice: over 2 s
async def test_a_recorded_run_replays_with_the_binary_gone(fake, claude_on_path, tmp_path, session_id):
    path = tmp_path / "cassettes" / "two-turns.json"
    script_two_turns(fake)
    ran.clear()
    async with await Toolkit.load(tools=[add]) as toolkit:
        recorded = await client(Cassette(path, "record")).run("What is 2+3?", toolkit, session_id=session_id)
    assert recorded.status == "completed", recorded.error
    assert recorded.text == "It is 5." and ran == [(2, 3)] and len(fake.calls()) == 2

    saved = json.loads(path.read_text())
    assert saved["version"] == 1
    assert [(launch["turn"], launch["launch"]) for launch in saved["launches"]] == [(0, 1), (1, 1)]
    assert saved["launches"][0]["asked"]["argv"] == ["claude", "-p", "--tools=", "--output-format", "json"]
    assert saved["launches"][0]["asked"]["request"]["messages"] == [{"role": "user", "content": "What is 2+3?"}]
    assert saved["launches"][0]["asked"]["prompt"].startswith("You are the model behind a tool-calling agent.")
    second = saved["launches"][1]["asked"]["request"]["messages"]
    assert second[1]["tool_calls"][0]["id"] == second[2]["tool_call_id"] == "call#1", "the random id is normalised"
    assert json.loads(saved["launches"][1]["answer"]["stdout"])["result"] == envelope_answer("It is 5.")
    assert path.read_text() == json.dumps(saved, indent=2, ensure_ascii=False) + "\n", "stable, readable JSON"

    claude_on_path.unlink()
    assert shutil.which("claude") is None
    ran.clear()
    replaying = Cassette(path)  # auto: the file exists
    assert replaying.replaying
    async with await Toolkit.load(tools=[add]) as toolkit:
        replayed = await client(replaying).run("What is 2+3?", toolkit, session_id=session_id + "-replay")
    assert replayed.status == "completed", replayed.error
    assert replayed.text == "It is 5."
    assert ran == [(2, 3)], "the toolkit's tool really runs on replay"
    assert len(fake.calls()) == 2, "no process started"
    assert transcript(replayed.messages) == transcript(recorded.messages)
    assert replaying.unplayed() == []
    names = sorted(run.name for run in await task_runs(replayed.flow_run_id, expected=3))
    assert names == ["tool-0-add", "turn-0", "turn-1"], "a replayed run is still a flow with its task runs"

    ran.clear()  # and without a cassette the same client fails: the binary really is gone
    plain = create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI)
    async with await Toolkit.load(tools=[add]) as toolkit:
        live = await plain.run("What is 2+3?", toolkit, session_id=session_id + "-live")
    assert live.status == "failed" and live.error == "cli: command not found: claude"


async def recorded_cassette(fake: FakeCli, path: Path, session_id: str) -> None:
    script_two_turns(fake)
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client(Cassette(path, "record")).run("What is 2+3?", toolkit, session_id=session_id)
    assert result.status == "completed", result.error


async def test_a_changed_prompt_fails_with_the_pinned_error_and_a_diff(fake, claude_on_path, tmp_path, session_id):
    path = tmp_path / "c.json"
    await recorded_cassette(fake, path, session_id)
    claude_on_path.unlink()
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client(Cassette(path, "replay")).run("What is 2+4?", toolkit, session_id=session_id + "-2")
    assert result.status == "failed"
    assert result.error == (
        f"cassette: {path} has no recording for turn 0; the nearest recording (turn 0) differs:\n"
        "--- recorded (turn 0)\n"
        "+++ asked (turn 0)\n"
        "@@ -12,5 +12,5 @@\n"
        "       {\n"
        '         "role": "user",\n'
        '-        "content": "What is 2+3?"\n'
        '+        "content": "What is 2+4?"\n'
        "       }\n"
        "     ],"
    )
    assert len(fake.calls()) == 2, "replay never falls through to a live launch"


async def test_a_changed_tool_result_fails_at_the_turn_that_reads_it(fake, claude_on_path, tmp_path, session_id):
    path = tmp_path / "c.json"
    await recorded_cassette(fake, path, session_id)
    claude_on_path.unlink()

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b + 1

    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client(Cassette(path, "replay")).run("What is 2+3?", toolkit, session_id=session_id + "-2")
    assert result.status == "failed"
    header, diff = result.error.split(":\n", 1)
    assert header == f"cassette: {path} has no recording for turn 1; the nearest recording (turn 1) differs"
    changed = [line for line in diff.splitlines() if line.startswith(("-", "+"))]
    assert changed == [
        "--- recorded (turn 1)",
        "+++ asked (turn 1)",
        '-        "content": "5"',
        '+        "content": "6"',
    ], diff


async def test_a_request_asked_more_often_than_recorded_is_a_mismatch(fake, claude_on_path, tmp_path, session_id):
    """Each recording plays once: a second identical run does not quietly reuse the first's."""
    path = tmp_path / "c.json"
    await recorded_cassette(fake, path, session_id)
    cassette = Cassette(path, "replay")
    async with await Toolkit.load(tools=[add]) as toolkit:
        first = await client(cassette).run("What is 2+3?", toolkit, session_id=session_id + "-2")
        again = await client(cassette).run("What is 2+3?", toolkit, session_id=session_id + "-3")
    assert first.status == "completed", first.error
    assert again.error == (
        f"cassette: {path} has no recording for turn 0; "
        "the same request was recorded 1 time, and each was played already"
    )
    assert len(fake.calls()) == 2


@tool
def credentials() -> str:
    """Where the credentials are, and when they were read."""
    return (
        f"token {os.environ['NEXUSFLOW_TEST_SECRET']} read at {datetime.now(UTC).isoformat()}"
        f" from {os.environ['NEXUSFLOW_TEST_PLACE']}/creds.txt"
    )


async def test_no_secret_place_or_time_reaches_the_cassette(fake, claude_on_path, tmp_path, monkeypatch, session_id):
    secret, literal = "s3cr3t-from-the-environment", "sk-literal-key-0123456789"
    monkeypatch.setenv("NEXUSFLOW_TEST_SECRET", secret)
    place = tmp_path / "place-a"
    monkeypatch.setenv("NEXUSFLOW_TEST_PLACE", str(place))
    echoed = f"using {secret} and {literal} from {place}"
    fake.script(
        styled("claude", envelope_calls({"id": "c1", "name": "credentials", "arguments": {}})) | {"stderr": echoed},
        styled("claude", envelope_answer(f"Found it in {place}/creds.txt ({secret})")),
    )
    env = {"SERVICE_TOKEN": "${NEXUSFLOW_TEST_SECRET}", "PROVIDER_API_KEY": literal}
    path = tmp_path / "c.json"
    cassette = Cassette(path, "record", places={"<tmp_path>": place})
    chosen = create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI, env=env, cassette=cassette)
    async with await Toolkit.load(tools=[credentials]) as toolkit:
        result = await chosen.run("Where are the credentials?", toolkit, session_id=session_id)
    assert result.status == "completed", result.error

    text = path.read_text()
    for leaked in (secret, literal, str(place), str(tmp_path), str(Path.home()), datetime.now(UTC).strftime("%Y-%m-")):
        assert leaked not in text, leaked
    assert "***" in text and "<tmp_path>/creds.txt" in text and "<timestamp>" in text

    # Replayed on another machine: another place, another time; the secret is set there too.
    claude_on_path.unlink()
    other = tmp_path / "place-b"
    monkeypatch.setenv("NEXUSFLOW_TEST_PLACE", str(other))
    replaying = Cassette(path, "replay", places={"<tmp_path>": other})
    again = create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI, env=env, cassette=replaying)
    async with await Toolkit.load(tools=[credentials]) as toolkit:
        replayed = await again.run("Where are the credentials?", toolkit, session_id=session_id + "-2")
    assert replayed.status == "completed", replayed.error
    assert replayed.text == f"Found it in {other}/creds.txt (***)", "places come back as the replaying machine's"


async def test_a_path_followed_by_punctuation_replays_from_another_folder(
    fake, claude_on_path, tmp_path, session_id, monkeypatch
):
    """A place ends where a sentence or a bracket ends it too: a prompt naming the folder
    before a full stop, a question mark or inside brackets is recorded with ``<tmp_path>``
    and matches the prompt that names another folder on replay. The folders stand for
    project folders, so this machine's temporary folder is elsewhere (a path under it is
    normalised as a temporary one anyway)."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))

    def prompt(place: Path) -> str:
        return f"Work in {place}. Is it ({place})? Or [{place}]! Say '{place}'."

    here, there = tmp_path / "recorded-here", tmp_path / "replayed-there"
    fake.script(styled("claude", envelope_answer(f"Done in {here}.")))
    path = tmp_path / "c.json"
    recorder = Cassette(path, "record", places={"<tmp_path>": here})
    recording = create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI, cassette=recorder)
    assert (await recording.run(prompt(here), session_id=session_id)).status == "completed"
    text = path.read_text()
    assert str(here) not in text

    claude_on_path.unlink()
    replaying = Cassette(path, "replay", places={"<tmp_path>": there})
    replayed = await create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI, cassette=replaying).run(
        prompt(there), session_id=session_id + "-2"
    )
    assert replayed.status == "completed", replayed.error
    assert replayed.text == f"Done in {there}."


def test_replay_without_a_recording_fails_at_once(tmp_path):
    with pytest.raises(CassetteError) as caught:
        Cassette(tmp_path / "none.json", "replay")
    assert str(caught.value) == (
        f"cassette: {tmp_path / 'none.json'} does not exist and the mode is replay: record it first"
        " (mode record or auto)"
    )


def test_the_environment_sets_the_mode_an_argument_leaves_out(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    assert Cassette(path).mode == "record"
    monkeypatch.setenv("NEXUSFLOW_CASSETTE_MODE", "replay")
    with pytest.raises(CassetteError, match="does not exist and the mode is replay"):
        create_cli_client(CliStyles.CLAUDE, "claude", cassette=path)
    assert Cassette(path, "record").mode == "record", "an argument wins over the environment"
    monkeypatch.setenv("NEXUSFLOW_CASSETTE_MODE", "sometimes")
    refused = "NEXUSFLOW_CASSETTE_MODE: input should be 'record', 'replay' or 'auto', not 'sometimes'"
    with pytest.raises(ValueError, match=refused):
        Cassette(path)


def test_a_file_that_is_not_a_cassette_of_this_version_is_refused(tmp_path):
    path = tmp_path / "c.json"
    for content, message in [
        (json.dumps({"version": 4, "launches": []}), "is version 4; this nexusflow reads versions 1, 2 and 3: record"),
        ("{", "is not JSON: Expecting property name enclosed in double quotes at line 1"),
        (json.dumps({"version": 1, "launches": [{"turn": 0}]}), "is not a cassette: launches.0.asked: Field required"),
    ]:
        path.write_text(content)
        with pytest.raises(CassetteError) as caught:
            Cassette(path)
        assert str(caught.value).startswith(f"cassette: {path} {message}"), str(caught.value)


def test_places_end_where_a_path_component_ends():
    scrub = Scrub({"<home>": "/home/al"})
    assert scrub.safe("/home/al/x, /home/alice, /home/al") == "<home>/x, /home/alice, <home>"
    assert scrub.safe("in /home/al. (/home/al)? /home/al! /home/al.bak") == "in <home>. (<home>)? <home>! /home/al.bak"
    assert scrub.restore("<home>/x") == "/home/al/x"
    temporary = tempfile.gettempdir()
    assert scrub.stable(f"{temporary}/pytest-7/a b /var{temporary}/keep") == f"<tmp> b /var{temporary}/keep"
    assert scrub.stable("at 2026-12-04T18:11:12.264407+00:00 and 2026-12-04 18:11") == "at <timestamp> and <timestamp>"


async def test_an_acp_replay_with_no_session_of_its_style_fails_and_starts_nothing(tmp_path, session_id):
    """ACP sessions are recorded too (tests/server/transports/test_acp_cassettes.py); a cassette that holds none
    of the client's style fails the run with the pinned mismatch, never a live launch."""
    path = tmp_path / "c.json"
    Cassette(path, "record").save()
    chosen = create_cli_client(CliStyles.GEMINI, "gemini", "m", transport=Transport.ACP, cassette=Cassette(path))
    result = await chosen.run("hi", session_id=session_id)
    assert result.status == "failed"
    assert result.error == f'cassette: {path} has no recording for a turn; it holds no ACP session of style "gemini"'


async def test_a_mismatch_is_a_cassette_mismatch(fake, claude_on_path, tmp_path, session_id):
    """Raised by the transport itself, the error is a class of its own that names the turn."""
    from nexusflow import ModelRequest
    from nexusflow.transports import TurnScope
    from nexusflow.transports.oneshot import CliConfig, CliTransport, builtin_style

    cassette = Cassette(tmp_path / "c.json", "record")
    cassette.save()
    replaying = Cassette(tmp_path / "c.json")
    transport = CliTransport(CliConfig(style=builtin_style(CliStyles.CLAUDE), command="claude"), replaying)
    request = ModelRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "tools": []})
    with pytest.raises(CassetteMismatch) as caught:
        await transport.generate(request, TurnScope(step=3))
    assert caught.value.turn == 3
    assert str(caught.value) == f"cassette: {tmp_path / 'c.json'} has no recording for turn 3; it holds no launch"
    assert fake.calls() == []


def test_the_plugin_is_registered_as_pytest_documents_for_a_package():
    """A ``pytest11`` entry point: installing nexusflow loads the marker and the fixture."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (module,) = project["entry-points"]["pytest11"].values()
    plugin = importlib.import_module(module)
    assert callable(plugin.pytest_configure) and hasattr(plugin, "nexusflow_cassette")


async def test_a_launch_that_failed_replays_its_failure(fake, claude_on_path, tmp_path):
    """A timeout and output that is not UTF-8 are recorded as they happened (the output as
    hex), and replayed as the same errors with no process started."""
    from nexusflow import CliError, ModelRequest
    from nexusflow.transports import TurnScope
    from nexusflow.transports.oneshot import CliConfig, CliTransport, builtin_style

    fake.script({"sleep": 5})
    path = tmp_path / "c.json"
    style = builtin_style(CliStyles.CLAUDE)
    # The first launch times out on purpose; the second must not, however slowly a busy
    # machine starts the fake CLI: it has a timeout of its own.
    configs = [CliConfig(style=style, command="claude", timeout=0.5), CliConfig(style=style, command="claude")]

    async def errors(mode: str) -> list[str]:
        cassette = Cassette(path, mode)
        said = []
        for prompt, config in zip(("first", "second"), configs, strict=True):
            if mode == "record" and prompt == "second":
                # The fake plays the reply its launch's count names; a first launch killed by its
                # timeout before it counted itself (a busy machine) must not shift the second's.
                fake.script(*[{"sleep": 5}] * len(fake.calls()), {"stdout_hex": "ff00"})
            request = ModelRequest.model_validate({"messages": [{"role": "user", "content": prompt}], "tools": []})
            with pytest.raises(CliError) as caught:
                await CliTransport(config, cassette).generate(request, TurnScope(step=0))
            said.append(str(caught.value))
        return said

    recorded = await errors("record")
    assert recorded == ["cli: timed out after 500ms", "cli: the output is not UTF-8: byte 0xff at position 0"]
    assert [launch["answer"]["hex"] for launch in json.loads(path.read_text())["launches"]] == [[], ["stdout"]]
    launched = len(fake.calls())
    claude_on_path.unlink()
    assert await errors("replay") == recorded
    assert len(fake.calls()) == launched, "the replay started no process"
