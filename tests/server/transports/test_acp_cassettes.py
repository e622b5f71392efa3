"""Cassettes of ACP sessions: a run of the scripted ACP agent (a real process speaking ACP on
stdio, calling our served toolkit over MCP) is recorded, then replayed with the agent's
command gone: the same transcript, tool calls, result and Prefect task runs. Drift (a prompt,
a tool's result) fails with the pinned error and a diff; nothing secret reaches the file."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nexusflow import CassetteError, CliStyles, Toolkit, Transport, create_cli_client, tool
from nexusflow.testing import Cassette, crash_at_every_step
from nexusflow.transports.cassette import AcpSession

from acp_fixtures import ScriptedAgent
from helpers import acp_cassette
from helpers.docs import REPO, block
from helpers.prefect_api import task_runs
from live_agents import ACP_STYLE_IDS, ACP_STYLES
from paths import HELPERS

pytestmark = [pytest.mark.anyio]

ran: list[tuple[int, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append((a, b))
    return a + b


SCRIPT = [
    [
        {"thought": "let me add"},
        {"tool": "add", "arguments": {"a": 1, "b": 2}, "permission": True},
        {"shell": "rm -rf /"},
        {"say": "1+2=3"},
        {"usage": {"inputTokens": 12, "outputTokens": 5}},
    ]
]


def client(agent: ScriptedAgent, cassette: Cassette, command: str | None = None, **options):
    return create_cli_client(
        style=agent.style,
        command=command or agent.command,
        transport=options.pop("transport", Transport.ACP),
        env={**agent.env, **options.pop("env", {})},
        cassette=cassette,
        **options,
    )


async def run(agent: ScriptedAgent, cassette: Cassette, session_id: str, prompt: str = "go", **options):
    async with await Toolkit.load(tools=[add]) as toolkit:
        return await client(agent, cassette, **options).run(prompt, toolkit, session_id=session_id)


def transcript(messages) -> list[tuple[str, str | None, list[tuple[str, object]]]]:
    return [
        (m.role, getattr(m, "content", None), [(c.name, c.arguments) for c in getattr(m, "tool_calls", None) or []])
        for m in messages
    ]


async def recorded(agent: ScriptedAgent, path: Path, session_id: str, **options):
    agent.script(SCRIPT)
    ran.clear()
    result = await run(agent, Cassette(path, "record"), session_id, system_prompt="Be exact.", **options)
    assert result.status == "completed", result.error
    return result


@pytest.mark.slow  # two runs, one of them a real agent process: about 3 s
async def test_a_recorded_acp_session_replays_with_no_agent(agent, tmp_path, session_id):
    path = tmp_path / "acp.json"
    live = await recorded(agent, path, session_id)
    assert live.text == "1+2=3" and ran == [(1, 2)]
    saved = json.loads(path.read_text())
    assert saved["version"] == 3 and saved["launches"] == []
    (session,) = saved["acp"]
    assert (session["style"], session["agent"]) == ("scripted", Path(agent.command).name)
    kinds = [next(k for k in ("client", "agent", "raw", "tool") if k in event) for event in session["events"]]
    assert kinds.count("tool") == 1
    methods = [e["client"].get("method") for e in session["events"] if "client" in e]
    assert methods[:3] == ["initialize", "session/new", "session/prompt"]
    asked = [e["agent"] for e in session["events"] if "agent" in e and e["agent"].get("method")]
    permissions = [m for m in asked if m["method"] == "session/request_permission"]
    assert len(permissions) == 2, "the served tool's and the shell's"
    assert "mcp__<mcp-server>__add" in json.dumps(permissions), "the random server name is named"
    (use,) = [e["tool"] for e in session["events"] if "tool" in e]
    assert use == {"name": "add", "arguments": {"a": 1, "b": 2}, "result": "3", "is_error": False}
    assert path.read_text() == json.dumps(saved, indent=2, ensure_ascii=False) + "\n", "stable, readable JSON"
    started = len(agent.log("started"))

    ran.clear()
    missing = str(tmp_path / "no-such-agent")
    replaying = Cassette(path)  # auto: the file exists
    assert replaying.replaying
    replayed = await run(agent, replaying, session_id + "-replay", system_prompt="Be exact.", command=missing)
    assert replayed.status == "completed", replayed.error
    assert len(agent.log("started")) == started, "no agent process started"
    assert replayed.text == live.text
    assert ran == [(1, 2)], "the served tool really ran on replay"
    assert transcript(replayed.messages) == transcript(live.messages)
    assert (replayed.metrics.input_tokens, replayed.metrics.output_tokens) == (12, 5)
    assert replaying.unplayed_acp() == []
    runs = sorted(r.name for r in await task_runs(replayed.flow_run_id, expected=3))
    assert runs == sorted(r.name for r in await task_runs(live.flow_run_id, expected=3))
    assert runs == ["acp-session", "tool-0-add", "turn-0"], "a replayed run is a flow with its task runs"

    plain = await run(agent, None, session_id + "-live", command=missing)  # type: ignore[arg-type]
    assert plain.status == "failed" and plain.error == f"acp: command not found: {missing}"


@pytest.mark.parametrize("style", ACP_STYLES, ids=ACP_STYLE_IDS)
async def test_a_committed_acp_cassette_replays_offline(style, tmp_path):
    """tests/cassettes/acp-<agent>.json, recorded from the real agent against the scripted
    model server: our ACP client still drives it to the same end, with no binary at all."""
    cassette = Cassette(acp_cassette.committed(style), "replay")
    acp_cassette.ran.clear()
    result = await acp_cassette.replay(style, cassette, tmp_path)
    assert result.status == "completed", result.error
    assert result.text.endswith("It is 42.")
    assert acp_cassette.ran == [(20, 22)], "the served tool really ran"
    calls = [call for _, _, calls in acp_cassette.transcript(result.messages) for call in calls]
    assert calls == [("add", json.dumps({"a": 20, "b": 22}))]
    assert cassette.unplayed_acp() == []


@tool(name="add")
def add_one_more(a: int, b: int) -> int:
    """Add two integers."""
    return a + b + 1


def assert_the_prompt_drifted(result, path: Path) -> None:
    """The pinned mismatch of claude's committed cassette replayed with "What is 20+23?"."""
    assert result.status == "failed"
    header, diff = result.error.split(":\n", 1)
    assert header == f"cassette: {path} has no recording for turn 0; the recorded session/prompt (turn 0) differs"
    changed = [line for line in diff.splitlines() if line.startswith(("-", "+"))]
    assert changed == [
        "--- recorded (turn 0)",
        "+++ asked (turn 0)",
        '-        "text": "What is 20+22? Use the add tool."',
        '+        "text": "What is 20+23?"',
    ], diff


async def test_a_changed_prompt_fails_with_the_pinned_error_and_a_diff(tmp_path):
    path = acp_cassette.committed(CliStyles.CLAUDE)
    result = await acp_cassette.replay(CliStyles.CLAUDE, Cassette(path, "replay"), tmp_path, "What is 20+23?")
    assert_the_prompt_drifted(result, path)


async def test_a_changed_tool_result_fails_naming_the_tool_and_the_turn(tmp_path):
    path = acp_cassette.committed(CliStyles.CODEX)
    result = await acp_cassette.replay(CliStyles.CODEX, Cassette(path, "replay"), tmp_path, tools=[add_one_more])
    assert result.status == "failed"
    header, diff = result.error.split(":\n", 1)
    assert header == f"cassette: {path} has no recording for turn 0; the recorded result of tool add (turn 0) differs"
    changed = [line for line in diff.splitlines() if line.startswith(("-", "+"))]
    assert changed == ["--- recorded (turn 0)", "+++ asked (turn 0)", '-  "result": "42",', '+  "result": "43",'], diff


async def test_auto_replays_acp_from_the_cassette_in_use(tmp_path, caplog):
    """A client with no cassette of its own takes the one in use (what the pytest marker
    does), and AUTO takes ACP for it: the cassette holds an ACP session of the style."""
    caplog.set_level(logging.INFO)
    cassette = Cassette(acp_cassette.committed(CliStyles.CLAUDE), "replay")
    with cassette.used():
        result = await acp_cassette.replay(CliStyles.CLAUDE, None, tmp_path, transport=Transport.AUTO)  # type: ignore[arg-type]
    assert result.status == "completed", result.error
    assert any(r.getMessage().startswith("transport: ACP for claude") for r in caplog.records)
    assert cassette.unplayed_acp() == []


async def test_no_secret_reaches_the_cassette(agent, tmp_path, session_id, monkeypatch):
    """A ``${VAR}`` value given to the agent, an API key in its env and one in ours, and the
    MCP token: the agent says each of them, and the recording holds none."""
    given, literal, ours = "expanded-secret-4f1a", "sk-literal-key-9c2e", "sk-parent-key-77d3"
    monkeypatch.setenv("NF_ACP_GIVEN", given)
    monkeypatch.setenv("NF_ACP_PARENT_API_KEY", ours)
    said = f"given {given}, key {literal}, ours {ours}"
    agent.script([[{"say": said}, {"tool": "add", "arguments": {"a": 1, "b": 1}}]])
    env = {"NF_WHATEVER": "${NF_ACP_GIVEN}", "MY_API_KEY": literal}
    path = tmp_path / "secret.json"
    result = await run(agent, Cassette(path, "record"), session_id, prompt=f"the key is {literal}", env=env)
    assert result.status == "completed", result.error
    (new,) = agent.received("session/new")
    (header,) = new["params"]["mcpServers"][0]["headers"]
    token = header["value"].removeprefix("Bearer ")
    assert len(token) > 20
    assert [entry["env"].get("NF_WHATEVER") for entry in agent.log("started")] == [given], "the agent had them"
    text = path.read_text()
    for secret in (given, literal, ours, token):
        assert secret not in text
    assert '"value": "Bearer ***"' in text and "given ***, key ***, ours ***" in text


@pytest.mark.slow  # two runs, one of them a real agent process: about 3 s
async def test_a_secret_and_a_path_streamed_in_pieces_are_masked_whole_and_replayed(
    agent, tmp_path, session_id, monkeypatch
):
    """The agent streams a ``${VAR}`` secret and its working folder across five-character
    ``agent_message_chunk`` updates: no piece of either is recorded, and the replay from
    another folder says the mask and that folder."""
    given = "sk-chunked-" + os.urandom(8).hex()
    monkeypatch.setenv("NF_ACP_CHUNKED", given)
    here, there = tmp_path / "recorded-here", tmp_path / "replayed-there"
    here.mkdir()
    there.mkdir()
    said = f"key {given}, work in {here}."
    agent.script([[{"say": said[start : start + 5]} for start in range(0, len(said), 5)]])
    env = {"NF_TOKEN": "${NF_ACP_CHUNKED}"}
    path = tmp_path / "chunks.json"
    options = {"env": env, "workspace": tmp_path}
    live = await run(agent, Cassette(path, "record"), session_id, cwd=here, **options)
    assert live.status == "completed", live.error
    assert live.text == said

    (session,) = json.loads(path.read_text())["acp"]
    chunks = [
        event["agent"]["params"]["update"]["content"]["text"]
        for event in session["events"]
        if event.get("agent", {}).get("params", {}).get("update", {}).get("sessionUpdate") == "agent_message_chunk"
    ]
    assert "".join(chunks) == "key ***, work in <acp-cwd>."
    text = path.read_text()
    assert given[:8] not in text and given[-8:] not in text and "recorded-" not in text

    missing = str(tmp_path / "no-such-agent")
    replayed = await run(agent, Cassette(path, "replay"), session_id + "-replay", command=missing, cwd=there, **options)
    assert replayed.status == "completed", replayed.error
    assert replayed.text == f"key ***, work in {there}."


def test_version_1_and_2_files_still_read_and_acp_needs_version_3(tmp_path):
    path = tmp_path / "c.json"
    exported = {"turn": 0, "asked": {"request": {"messages": []}}, "reply": {"content": "hi"}, "seconds": 0.1}
    session = {"style": "claude", "agent": "claude-agent-acp", "events": [{"turn": None, "client": {"id": 0}}]}
    for version, launches in ((1, []), (2, [exported])):
        path.write_text(json.dumps({"version": version, "launches": launches}))
        assert Cassette(path, "replay").acp_sessions == []
    path.write_text(json.dumps({"version": 2, "launches": [], "acp": [session]}))
    with pytest.raises(CassetteError, match="is not a cassette: .*a cassette before version 3 holds no ACP session"):
        Cassette(path, "replay")
    path.write_text(json.dumps({"version": 3, "launches": [], "acp": [session]}))
    assert Cassette(path, "replay").acp_sessions[0].events[0].kind == "client"
    mixed = {**session, "events": [{"turn": 0, "client": {"id": 0}, "agent": {"id": 0}}]}
    path.write_text(json.dumps({"version": 3, "launches": [], "acp": [mixed]}))
    with pytest.raises(CassetteError, match="exactly one of client, agent, raw, tool and ended"):
        Cassette(path, "replay")


async def test_an_agent_that_crashed_mid_turn_replays_the_same_failure(agent, tmp_path, session_id):
    agent.script([[{"say": "partial"}, {"crash": 3}]])
    path = tmp_path / "crash.json"
    live = await run(agent, Cassette(path, "record"), session_id)
    assert live.status == "failed" and live.error.startswith("acp: the agent exited during the turn (exit 3)")
    (session,) = json.loads(path.read_text())["acp"]
    assert session["events"][-1] == {
        "turn": 0,
        "ended": live.error.removeprefix("acp: the agent exited during the turn"),
    }
    missing = str(tmp_path / "no-such-agent")
    replayed = await run(agent, Cassette(path, "replay"), session_id + "-replay", command=missing)
    assert (replayed.status, replayed.error) == (live.status, live.error)
    assert len(agent.log("started")) == 1


@tool
def approve_me(item: str) -> str:
    """Needs a yes first."""
    from nexusflow import current_answer, suspend

    if current_answer() is None:
        return suspend(f"May I touch {item}?")
    ran.append((len(item), 0))
    return f"touched {item}"


async def pending_then_resumed(client, session_id: str):  # type: ignore[no-untyped-def]
    from nexusflow import Answer

    async with await Toolkit.load(tools=[approve_me]) as toolkit:
        first = await client.run("go", toolkit, session_id=session_id)
        assert first.status == "pending", first.error
        second = await client.resume(session_id, Answer(id=first.request.id, ok=True), toolkit)
    return first, second


@pytest.mark.slow  # two live agent processes, then two replays: about 5 s
async def test_a_run_that_waited_and_resumed_replays_the_same_way(agent, tmp_path, session_id):
    """A durable run stays durable on replay: the run ends pending at the served call, is
    answered, and resumes by loading the agent's session, as it did when recorded."""
    agent.script(
        [
            [{"tool": "approve_me", "arguments": {"item": "cache"}}, {"sleep": 30}, {"say": "never"}],
            [{"tool": "approve_me", "arguments": {"item": "cache"}}, {"say": "cleared"}],
        ],
        capabilities={"mcpCapabilities": {"http": True}, "loadSession": True},
    )
    path = tmp_path / "resumed.json"
    ran.clear()
    live = await pending_then_resumed(client(agent, Cassette(path, "record")), session_id)
    assert live[1].status == "completed" and live[1].text == "cleared" and ran == [(5, 0)]
    sessions = json.loads(path.read_text())["acp"]
    assert [[e["client"]["method"] for e in s["events"] if "method" in e.get("client", {})][1] for s in sessions] == [
        "session/new",
        "session/load",
    ]

    ran.clear()
    missing = str(tmp_path / "no-such-agent")
    replaying = Cassette(path, "replay")
    replayed = await pending_then_resumed(client(agent, replaying, missing), session_id + "-replay")
    assert [(r.status, r.text) for r in replayed] == [(r.status, r.text) for r in live]
    assert replayed[0].request.prompt == "May I touch cache?"
    assert ran == [(5, 0)], "answered once, run once"
    assert transcript(replayed[1].messages) == transcript(live[1].messages)
    assert replaying.unplayed_acp() == []
    assert len(agent.log("started")) == 2, "no agent process started on replay"


async def test_auto_replays_the_one_shot_transport_when_the_cassette_holds_no_acp_session(
    agent, tmp_path, session_id, caplog
):
    caplog.set_level(logging.INFO)
    path = tmp_path / "empty.json"
    Cassette(path, "record").save()
    result = await run(agent, Cassette(path, "replay"), session_id, transport=Transport.AUTO)
    assert result.status == "failed"
    assert result.error == f"cassette: {path} has no recording for turn 0; it holds no launch"
    said = [r.getMessage() for r in caplog.records]
    because = f"the cassette {path} holds no ACP session of this style to replay"
    assert f"transport: one-shot CLI for scripted, because {because}" in said
    assert agent.log("started") == [], "nothing started"


@pytest.mark.parametrize("style", ACP_STYLES, ids=ACP_STYLE_IDS)
async def test_a_replayed_run_run_again_resumes_the_recorded_agent_session(style, tmp_path, caplog):
    """The second run of a session reopens the agent's session (resume, as the recorded
    capabilities advertise) and asks for no turn: the played agent takes the resume in
    place of the recorded session/new, and the turn replays from the store."""
    caplog.set_level(logging.INFO)
    path, session = acp_cassette.committed(style), f"again-{uuid.uuid4().hex}"
    acp_cassette.ran.clear()
    first = await acp_cassette.replay(style, Cassette(path, "replay"), tmp_path, session_id=session)
    assert first.status == "completed", first.error
    again = Cassette(path, "replay")
    second = await acp_cassette.replay(style, again, tmp_path, session_id=session)
    assert second.status == "completed", second.error
    assert second.text == first.text and acp_cassette.ran == [(20, 22)], "the tool ran once, in the first run"
    (recorded,) = {
        e.agent["result"]["sessionId"]
        for e in again.acp_sessions[0].events
        if e.agent and "result" in e.agent and "sessionId" in e.agent["result"]
    }
    assert f"acp: resuming agent session {recorded}" in [r.getMessage() for r in caplog.records]
    assert again.unplayed_acp() == []


async def test_a_resume_of_another_session_is_the_pinned_mismatch(tmp_path):
    """Strict: the played agent resumes only the session it recorded."""
    path, session = acp_cassette.committed(CliStyles.CLAUDE), f"other-{uuid.uuid4().hex}"
    first = await acp_cassette.replay(CliStyles.CLAUDE, Cassette(path, "replay"), tmp_path, session_id=session)
    assert first.status == "completed", first.error
    recorded = json.loads(path.read_text())["acp"][0]["events"][4]["agent"]["result"]["sessionId"]
    other = tmp_path / "other.json"
    other.write_text(path.read_text().replace(recorded, "0ther-5e55-10n"))
    result = await acp_cassette.replay(CliStyles.CLAUDE, Cassette(other, "replay"), tmp_path, session_id=session)
    assert result.status == "failed"
    header, diff = result.error.split(":\n", 1)
    assert header == f"cassette: {other} has no recording for a turn; the recorded session/new (the handshake) differs"
    changed = [line for line in diff.splitlines() if line.startswith(("-", "+"))]
    assert changed == [
        "--- recorded (handshake)",
        "+++ asked (handshake)",
        '-  "method": "session/new",',
        '+  "method": "session/resume",',
        '+    "sessionId": "' + recorded + '",',
    ], diff


async def test_a_resumed_turn_that_matches_no_recorded_turn_is_the_pinned_mismatch(tmp_path):
    """Skipping ahead is by content: a resumed run that asks a turn never recorded (its
    prompt changed) fails with the diff against the recorded turn it stands at."""
    path, session = acp_cassette.committed(CliStyles.CLAUDE), f"drift-{uuid.uuid4().hex}"
    first = await acp_cassette.replay(CliStyles.CLAUDE, Cassette(path, "replay"), tmp_path, session_id=session)
    assert first.status == "completed", first.error
    result = await acp_cassette.replay(
        CliStyles.CLAUDE, Cassette(path, "replay"), tmp_path, "What is 20+23?", session_id=session
    )
    assert_the_prompt_drifted(result, path)


REOPEN = {"session/resume": {"sessionCapabilities": {"resume": {}}}, "session/load": {"loadSession": True}}


@pytest.mark.parametrize(
    "method",
    ["session/resume", pytest.param("session/load", marks=pytest.mark.slow)],  # a live agent each: ~2 s
)
async def test_a_resumed_replay_skips_ahead_to_the_turn_it_asks_for(agent, tmp_path, session_id, method):
    """A two-turn session (the answer, then its output repair) is recorded. A replay that
    failed after turn 0 was stored is run again: it reopens the agent's session (the way the
    recorded capabilities say) and asks only for turn 1, which the played agent skips to."""
    agent.script(
        [[{"tool": "add", "arguments": {"a": 1, "b": 2}}, {"say": "three"}], [{"say": "3"}]],
        capabilities={"mcpCapabilities": {"http": True}, **REOPEN[method]},
    )
    path = tmp_path / "two-turns.json"
    ran.clear()
    live = await run(agent, Cassette(path, "record"), session_id, output_type=int)
    assert (live.status, live.output, ran) == ("completed", 3, [(1, 2)]), live.error
    saved = json.loads(path.read_text())
    turns = [e["turn"] for e in saved["acp"][0]["events"] if e.get("client", {}).get("method") == "session/prompt"]
    assert turns == [0, 1]
    cut = tmp_path / "turn-0-only.json"
    events = saved["acp"][0]["events"]
    saved["acp"][0]["events"] = events[: max(i for i, e in enumerate(events) if e["turn"] == 0) + 1]
    cut.write_text(json.dumps(saved))

    ran.clear()
    missing, replayed = str(tmp_path / "no-such-agent"), session_id + "-replay"
    first = await run(agent, Cassette(cut, "replay"), replayed, command=missing, output_type=int)
    assert first.status == "failed" and "the recorded session had ended; our client sent session/prompt" in first.error
    assert ran == [(1, 2)]
    whole = Cassette(path, "replay")
    second = await run(agent, whole, replayed, command=missing, output_type=int)
    assert (second.status, second.output) == ("completed", 3), second.error
    assert ran == [(1, 2)], "turn 0 and its tool call replayed from the store"
    assert second.metrics.replayed_turns == 1
    assert whole.unplayed_acp() == []
    assert len(agent.log("started")) == 1, "no agent process started on replay"


@pytest.mark.slow  # nine processes, two at a time: about a minute
@pytest.mark.timeout(600)
def test_a_replay_killed_at_every_step_resumes_from_the_store(monkeypatch, tmp_path):
    """A replayed ACP run is a durable run: killed (SIGKILL, whole group) at each step
    boundary and resumed in a new process with the same session and cassette, with no agent
    on PATH and no model server. The resume reopens the recorded agent session, each
    finished step replays from the store, ``add`` runs once per session, and the resumed run
    prints what the uninterrupted one printed. On claude's cassette: the fast tier reopens
    each committed cassette's session (codex's too) by running it again."""
    style = CliStyles.CLAUDE
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    logs = tmp_path / "logs"
    logs.mkdir()
    script = HELPERS / "acp_cassette_replay.py"
    report = crash_at_every_step(script, style.value, "{session}", str(logs), concurrency=2)
    assert report.steps == ["acp-session-0 call 0", "tool-0 call 0", "turn-0"]
    assert report.tool_calls == {"add": 1}
    status, text, error, calls, messages, paid = json.loads(report.output)
    assert (status, error, calls, messages) == ("completed", None, ["add"], 4) and text.endswith("It is 42.")
    assert paid.startswith("tokens 20 in / 10 out"), "what the session cost, its replayed turn included"
    assert [boundary.replayed for boundary in report.boundaries] == [
        [],
        ["acp-session-0 call 0"],
        ["acp-session-0 call 0", "tool-0 call 0"],
        ["acp-session-0 call 0", "tool-0 call 0", "turn-0"],
    ]
    assert all(boundary.failure is None and boundary.in_flight_again == [] for boundary in report.boundaries)
    added = sorted(log.read_text().count(" add 20 22\n") for log in logs.glob("*.log"))
    assert added == [1] * 5, "add ran once in each session, across the kill and its resume"


async def test_a_tool_result_narrows_the_recorded_sessions_to_those_that_got_it(tmp_path):
    """Two recorded sessions alike up to a tool's result (a call that ended its run pending in
    one, and was answered in the other, say): the replayed call's result picks the session
    that goes on, whichever leads; a result neither got is the pinned mismatch."""
    path = acp_cassette.committed(CliStyles.CLAUDE)
    saved = json.loads(path.read_text())
    (session,) = saved["acp"]
    other = json.loads(json.dumps(session).replace('"result": "42"', '"result": "41"'))
    saved["acp"] = [other, session]
    both = tmp_path / "both.json"
    both.write_text(json.dumps(saved))
    acp_cassette.ran.clear()
    cassette = Cassette(both, "replay")
    result = await acp_cassette.replay(CliStyles.CLAUDE, cassette, tmp_path)
    assert result.status == "completed" and result.text.endswith("It is 42."), result.error
    assert cassette.unplayed_acp() == [AcpSession.model_validate(other)], "the session recorded with 41 was left"
    failed = await acp_cassette.replay(CliStyles.CLAUDE, Cassette(both, "replay"), tmp_path, tools=[add_one_more])
    assert failed.status == "failed"
    header = failed.error.split(":\n", 1)[0]
    assert header == f"cassette: {both} has no recording for turn 0; the recorded result of tool add (turn 0) differs"


@pytest.mark.slow  # two processes
def test_the_docs_resume_example_replays_its_turn_when_run_again(tmp_path):
    """Testing → Cassettes for ACP sessions: the example run twice from the repository root with
    no agent on PATH prints what the page says: ``add`` runs in the first run only."""
    (tmp_path / "resume.py").write_text(block("acp-replay-resume"))
    session = f"docs-resume-{uuid.uuid4().hex[:8]}"

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(tmp_path / "resume.py"), session],
            cwd=REPO,
            env={**os.environ, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=180,
        )

    first = run()
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout == "add(20, 22) ran\ncompleted 'It is 42.' 0\n"
    again = run()
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == "completed 'It is 42.' 1\n"
