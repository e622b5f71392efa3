"""A cassette of the real claude (one-shot), recorded against the scripted model server, then
replayed with the binary off PATH and the server stopped: the same transcript, tool calls
and result; the same for the ACP agents. And the committed cassettes the fast tier replays
(tests/server/transports/test_recorded_cassettes.py, test_acp_cassettes.py), recorded again
from the pinned binaries. Locally a test skips when its binary is not installed; in CI it
fails.

Re-record the one-shot CLIs' cassettes (with the pinned CLIs installed by ``.ci/install-agents``)::

    NEXUSFLOW_CASSETTE_MODE=record CI=true PYTHONPATH=. pytest -p nexusflow.testing.pytest_plugin \\
        tests/live/test_live_cassettes.py -m live -k real_cli_records

(one CLI: ``-k "real_cli_records and codex"``). Without ``record`` that test records into a
temporary file and checks that the real CLI still gives the committed run's transcript and
that the committed cassette still asks what the code asks.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from nexusflow import CliStyles, Toolkit, Transport, create_cli_client, tool
from nexusflow.config.settings import settings
from nexusflow.testing import Cassette
from nexusflow.testing.agents import FAKE_KEY
from nexusflow.testing.conformance import SERVER_MODEL, scripted_cli

from helpers import acp_cassette, cli_cassette
from live_agents import ACP_STYLE_IDS, ACP_STYLES, ADAPTERS, ONE_SHOT, binary
from paths import CASSETTES

pytestmark = pytest.mark.anyio

ran: list[tuple[int, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append((a, b))
    return a + b


def transcript(messages) -> list[tuple[str, str | None, list[tuple[str, str]]]]:
    return [
        (
            m.role,
            getattr(m, "content", None),
            [(c.name, c.arguments) for c in getattr(m, "tool_calls", None) or []],
        )
        for m in messages
    ]


async def test_a_recorded_claude_run_replays_with_no_binary_and_no_server(tmp_path, monkeypatch):
    command = binary("claude")
    path = tmp_path / "claude.json"
    call = json.dumps({"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}]})
    answer = json.dumps({"content": "It is 5."})
    ran.clear()
    async with scripted_cli(CliStyles.CLAUDE, [call, answer]) as (server, home, env):
        recorder = create_cli_client(
            CliStyles.CLAUDE,
            command,
            SERVER_MODEL,
            transport=Transport.CLI,
            env=env,
            cwd=home,
            timeout=180,
            cassette=Cassette(path, "record"),
        )
        async with await Toolkit.load(tools=[add]) as toolkit:
            recorded = await recorder.run("What is 2+3? Use the add tool.", toolkit, session_id=f"live-{uuid.uuid4()}")
        asked = len(server.turns())
    assert recorded.status == "completed", recorded.error
    assert recorded.text == "It is 5." and ran == [(2, 3)] and asked == 2
    text = path.read_text()
    assert FAKE_KEY not in text and str(home) not in text
    launches = json.loads(text)["launches"]
    assert [launch["asked"]["argv"][0] for launch in launches] == ["claude", "claude"]

    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("claude") is None and not os.path.exists(home), "no binary, no server, no home"
    ran.clear()
    replayer = create_cli_client(
        CliStyles.CLAUDE, "claude", SERVER_MODEL, transport=Transport.CLI, env=env, cassette=Cassette(path, "replay")
    )
    async with await Toolkit.load(tools=[add]) as toolkit:
        replayed = await replayer.run("What is 2+3? Use the add tool.", toolkit, session_id=f"live-{uuid.uuid4()}")
    assert replayed.status == "completed", replayed.error
    assert replayed.text == recorded.text
    assert ran == [(2, 3)]
    assert transcript(replayed.messages) == transcript(recorded.messages)
    assert replayed.metrics.usage == recorded.metrics.usage, "the usage claude reported is replayed too"


@pytest.mark.parametrize("style", list(ADAPTERS), ids=[s.value for s in ADAPTERS])
async def test_a_recorded_acp_session_replays_with_no_binary_and_no_server(style, tmp_path, monkeypatch):
    """A real ACP agent (claude-agent-acp, codex-acp) recorded against the scripted model
    server, then replayed with both binaries off PATH and the server stopped."""
    command, adapter = binary(style.value), binary(ADAPTERS[style])
    path = tmp_path / "acp.json"
    acp_cassette.ran.clear()
    recorded, asked = await acp_cassette.record(style, Cassette(path, "record"), command, adapter)
    assert recorded.status == "completed", recorded.error
    assert recorded.text.endswith("It is 42.") and acp_cassette.ran == [(20, 22)] and asked >= 2
    text = path.read_text()
    assert FAKE_KEY not in text, "the API key the agent was given is masked"
    (session,) = json.loads(text)["acp"]
    assert session["agent"] == ADAPTERS[style]
    assert [event["tool"]["name"] for event in session["events"] if "tool" in event] == ["add"]

    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which(style.value) is None and shutil.which(ADAPTERS[style]) is None
    acp_cassette.ran.clear()
    replaying = Cassette(path, "replay")
    replayed = await acp_cassette.replay(style, replaying, tmp_path)
    assert replayed.status == "completed", replayed.error
    assert replayed.text == recorded.text
    assert acp_cassette.ran == [(20, 22)], "the served tool really ran on replay"
    assert acp_cassette.transcript(replayed.messages) == acp_cassette.transcript(recorded.messages)
    assert replaying.unplayed_acp() == []


@pytest.mark.parametrize("style", ONE_SHOT, ids=cli_cassette.IDS)
async def test_the_real_cli_records_the_committed_run(style: CliStyles, tmp_path: Path) -> None:
    """With ``NEXUSFLOW_CASSETTE_MODE=record`` this writes the committed cassette again."""
    command = binary(ONE_SHOT[style])
    again = os.environ.get("NEXUSFLOW_CASSETTE_MODE") == "record"
    path = CASSETTES / f"{ONE_SHOT[style]}.json" if again else tmp_path / f"{ONE_SHOT[style]}.json"
    async with scripted_cli(style, [cli_cassette.CALL, cli_cassette.ANSWER]) as (server, home, env):
        cassette = Cassette(path, "record", places={cli_cassette.AGENT_HOME: home})
        result = await cli_cassette.run(style, command, cassette, env=env, cwd=home, timeout=180)
        asked = len(server.turns())
    assert result.status == "completed", result.error
    assert result.text == "It is 5." and cli_cassette.ran == [(2, 3)] and asked == 2
    assert cli_cassette.transcript(result) == cli_cassette.TRANSCRIPT
    recorded = json.loads(path.read_text())
    assert [launch["asked"]["argv"][0] for launch in recorded["launches"]] == [ONE_SHOT[style]] * 2
    if not again:
        committed = json.loads((CASSETTES / f"{ONE_SHOT[style]}.json").read_text())
        assert [launch["asked"] for launch in recorded["launches"]] == [
            launch["asked"] for launch in committed["launches"]
        ], "the committed cassette is stale: re-record it (see the module docstring)"


@pytest.mark.parametrize("style", ACP_STYLES, ids=ACP_STYLE_IDS)
async def test_record_the_committed_acp_cassettes(style):
    """Re-records tests/cassettes/acp-<agent>.json from the pinned binaries:
    ``NEXUSFLOW_CASSETTE_MODE=record pytest -m live tests/live/test_live_cassettes.py -k committed_acp``."""
    if settings().cassette_mode != "record":
        pytest.skip("set NEXUSFLOW_CASSETTE_MODE=record to record the committed ACP cassettes again")
    path = acp_cassette.committed(style)
    path.unlink(missing_ok=True)
    acp_cassette.ran.clear()
    command, adapter = binary(style.value), binary(ADAPTERS[style])
    result, _ = await acp_cassette.record(style, Cassette(path, "record"), command, adapter)
    assert result.status == "completed", result.error
    assert result.text.endswith("It is 42.") and acp_cassette.ran == [(20, 22)]
