"""The ACP transport against a scripted ACP agent, through real Prefect runs."""

import logging
import os
import resource
import tempfile
from pathlib import Path

import anyio
import pytest

from nexusflow import (
    AcpError,
    RunFinished,
    TextChunk,
    ThoughtChunk,
    ToolCallFinished,
    ToolCallStarted,
    Toolkit,
    Transport,
    create_cli_client,
    tool,
)
from nexusflow._support import secrets

from acp_fixtures import HTTP
from cli_fixtures import alive
from helpers.prefect_api import task_runs

pytestmark = [pytest.mark.anyio]

calls: list[tuple[int, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    calls.append((a, b))
    return a + b


def client_for(agent, transport=Transport.ACP, env=None, **options):
    env = {**agent.env, **(env or {})}
    return create_cli_client(style=agent.style, command=agent.command, transport=transport, env=env, **options)


async def run(agent, session_id, prompt="go", transport=Transport.ACP, **options):
    async with await Toolkit.load(tools=[add]) as toolkit:
        return await client_for(agent, transport, **options).run(prompt, toolkit, session_id=session_id)


@pytest.mark.slow
async def test_a_turn_with_served_tools_permissions_and_the_token(agent, session_id):
    calls.clear()
    agent.script(
        [
            [
                {"thought": "let me add"},
                {"tool": "add", "arguments": {"a": 1, "b": 2}, "permission": True},
                {"tool": "add", "arguments": {"a": 3, "b": 4}},
                {"shell": "rm -rf /"},
                {"unauthorized": True},
                {"say": "1+2=3 "},
                {"say": "and 3+4=7"},
                {"usage": {"inputTokens": 12, "outputTokens": 5}},
            ]
        ]
    )
    result = await run(agent, session_id, system_prompt="Be exact.")
    assert result.status == "completed", result.error
    assert result.text == "1+2=3 and 3+4=7"
    assert calls == [(1, 2), (3, 4)]
    assert [e["text"] for e in agent.log("tool_result")] == ["3", "7"]
    assert agent.log("tool_permission")[0]["outcome"] == {"outcome": "selected", "optionId": "yes"}
    assert agent.log("shell_permission")[0]["outcome"] == {"outcome": "selected", "optionId": "no"}
    assert agent.log("unauthorized")[0]["status"] == 401
    (initialize,) = agent.received("initialize")
    assert initialize["params"]["protocolVersion"] == 1
    assert initialize["params"]["clientCapabilities"] == {
        "fs": {"readTextFile": False, "writeTextFile": False},
        "terminal": False,
    }
    (new,) = agent.received("session/new")
    (server,) = new["params"]["mcpServers"]
    assert server["type"] == "http" and server["url"].startswith("http://127.0.0.1:")
    assert server["name"].startswith("nexusflow_")
    assert os.path.isabs(new["params"]["cwd"])
    (prompt,) = agent.received("session/prompt")
    assert prompt["params"]["prompt"] == [{"type": "text", "text": "Be exact.\n\ngo"}]
    assert result.metrics.tool_calls == 2 and result.metrics.launches == 0
    assert (result.metrics.input_tokens, result.metrics.output_tokens) == (12, 5)
    assert [m.role for m in result.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    runs = await task_runs(result.flow_run_id, expected=4)
    assert sorted(r.name for r in runs) == ["acp-session", "tool-0-add", "tool-0-add-2", "turn-0"]
    turn = next(r for r in runs if r.name == "turn-0")
    for served in (r for r in runs if r.name.startswith("tool-0-add")):
        parents = [str(parent.id) for parent in served.task_inputs.get("__parents__", [])]
        assert parents == [str(turn.id)], "each served call is a task run under the turn"


async def test_the_parents_secrets_do_not_reach_the_agent(agent, session_id, monkeypatch):
    monkeypatch.setenv("NF_PARENT_SECRET", "must-not-cross")
    agent.script([[{"say": "ok"}]])
    result = await run(agent, session_id, env={"GIVEN": "${NF_PARENT_SECRET}-on-purpose"})
    assert result.status == "completed", result.error
    env = agent.log("started")[0]["env"]
    assert "must-not-cross" not in {k: v for k, v in env.items() if k != "GIVEN"}.values()
    assert "NF_PARENT_SECRET" not in env
    assert env["GIVEN"] == "must-not-cross-on-purpose"
    assert env["SCRIPTED_STYLE_ENV"] == "from-style"
    assert env["PATH"] == os.environ["PATH"]


async def test_the_agent_s_temporary_folder_is_its_own_and_goes_with_it(agent, session_id, tmp_path, monkeypatch):
    """An agent leaves files in its temporary folder (claude its probes and sockets): it gets
    one of its own, removed with it, so the system's folder stays as it was."""
    system = tmp_path / "system-tmp"
    system.mkdir()
    monkeypatch.setenv("TMPDIR", str(system))
    monkeypatch.setattr(tempfile, "tempdir", str(system))
    agent.script([[{"say": "ok"}]])
    result = await run(agent, session_id)
    assert result.status == "completed", result.error
    own = Path(agent.log("started")[0]["env"]["TMPDIR"])
    assert own.parent == system and own.name.startswith("nexusflow-acp-"), own
    assert list(system.iterdir()) == [], "the agent's folder outlived it"


@pytest.mark.slow
async def test_odd_agent_behaviour_is_tolerated(agent, session_id):
    agent.script(
        [
            [
                {"update": {"sessionUpdate": "hologram_update", "payload": 1}},
                {"notify": "_auth/status_update"},
                {"stderr": 50_000},
                {"malformed": True},
                {"request": "fs/read_text_file"},
                {"say": "before "},
                {"stop": "galaxy_brain"},
                {"after": [{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "after"}}]},
            ]
        ]
    )
    result = await run(agent, session_id)
    assert result.status == "completed", result.error
    assert result.text == "before after"
    assert result.metrics.stop_reasons == ["galaxy_brain"]
    (refused,) = agent.log("request_refused")
    assert refused["error"]["code"] == -32601


async def test_a_message_over_64_kib_arrives_whole(agent, session_id):
    big = "é" * 200_000
    agent.script([[{"say": big}]])
    result = await run(agent, session_id)
    assert result.status == "completed", result.error
    assert result.text == big


async def test_the_served_toolkit_closes_with_the_session(agent, session_id):
    import httpx2

    agent.script([[{"say": "ok"}]])
    assert (await run(agent, session_id)).status == "completed"
    url = agent.received("session/new")[0]["params"]["mcpServers"][0]["url"]
    with pytest.raises(httpx2.ConnectError):
        async with httpx2.AsyncClient() as http:
            await http.post(url, json={})


@pytest.mark.slow
async def test_streaming_over_acp_is_incremental(agent, session_id):
    agent.script(
        [[{"thought": "thinking"}, {"say": "one "}, {"tool": "add", "arguments": {"a": 1, "b": 1}}, {"say": "two"}]]
    )
    async with await Toolkit.load(tools=[add]) as toolkit:
        events = [e async for e in client_for(agent).stream("go", toolkit, session_id=session_id)]
    kinds = [type(e) for e in events]
    assert kinds == [ThoughtChunk, TextChunk, ToolCallStarted, ToolCallFinished, TextChunk, RunFinished]
    assert events[-1].result.text == "one two"


@pytest.mark.slow
async def test_a_timeout_cancels_then_ends_the_turn(agent, session_id):
    agent.script([[{"say": "working"}, {"sleep": 60}]])
    result = await run(agent, session_id, timeout=2)
    assert result.status == "failed"
    assert result.error == "acp: timed out after 2000ms (the agent ended the turn: cancelled)"
    assert agent.log("cancelled"), "session/cancel reached the agent"
    assert agent.received("session/cancel")[0]["params"]["sessionId"]
    pid = agent.log("started")[0]["pid"]
    await anyio.sleep(0.3)
    assert not alive(pid)


async def test_a_crash_mid_turn_is_a_clear_error_and_leaves_no_process(agent, session_id):
    agent.script([[{"say": "partial"}, {"crash": 3}]])
    result = await run(agent, session_id)
    assert result.status == "failed"
    assert result.error.startswith("acp: the agent exited during the turn (exit 3)")
    await anyio.sleep(0.3)
    assert not alive(agent.log("started")[0]["pid"])


async def test_an_agent_terminated_on_close_answers_and_leaves_no_process(agent, session_id):
    """A style's ``terminate_on_close`` (codex's) sends the group SIGTERM with the end of stdin."""
    agent.script([[{"say": "done"}]])
    style = agent.style.model_copy(update={"acp": agent.style.acp.model_copy(update={"terminate_on_close": True})})
    client = create_cli_client(style=style, command=agent.command, transport=Transport.ACP, env=agent.env)
    result = await client.run("go", session_id=session_id)
    assert result.status == "completed" and result.text == "done", result.error
    await anyio.sleep(0.3)
    assert not alive(agent.log("started")[0]["pid"])


@pytest.mark.slow
async def test_a_line_over_16_mib_fails_the_turn_kills_the_agent_and_stays_bounded(agent, session_id):
    agent.script([[{"say": "partial"}, {"flood": 20 * 2**20}, {"say": "never read"}]])
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result = await run(agent, session_id, timeout=60)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) * 1024
    assert result.status == "failed"
    assert result.error == "acp: the agent wrote a line over 16 MiB"
    assert grown < 200 * 2**20, f"the client's peak RSS grew {grown / 2**20:.0f} MiB"
    await anyio.sleep(0.3)
    assert not alive(agent.log("started")[0]["pid"])


async def test_a_served_token_is_forgotten_for_redaction_once_its_session_is_over(agent, session_id):
    """Each session's served toolkit has a token of its own, masked wherever text is redacted
    while it lives. A process running sessions for weeks kept every one, and each made every
    redaction slower: once the session's server and agent are gone, nothing takes it."""
    agent.script([[{"say": "fine"}], [{"say": "again"}]])
    for turn, said in enumerate(("fine", "again")):
        result = await run(agent, f"{session_id}-{turn}")
        assert result.status == "completed" and result.text == said, result.error
    tokens = [
        header["value"].removeprefix("Bearer ")
        for new in agent.received("session/new")
        for server in new["params"]["mcpServers"]
        for header in server["headers"]
        if header["name"] == "Authorization"
    ]
    assert len(tokens) == 2 and len(set(tokens)) == 2
    assert not any(token in secrets._values for token in tokens)
    assert secrets.redact(tokens[0]) == tokens[0]


STDERR_FLOOD = 50 * 2**20
STDERR_KEPT = 64 * 2**10


@pytest.mark.slow
async def test_a_stderr_flood_without_a_newline_neither_fails_the_run_nor_is_buffered(agent, session_id):
    agent.script([[{"say": "warm"}], [{"say": "before "}, {"stderr_flood": STDERR_FLOOD}, {"say": "after"}]])
    assert (await run(agent, session_id + "-warm")).status == "completed", "a first run's imports are not measured"
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result = await run(agent, session_id, timeout=60)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) * 1024
    assert result.status == "completed", result.error
    assert result.text == "before after"
    assert grown < 30 * 2**20, f"the client's peak RSS grew {grown / 2**20:.0f} MiB"


@pytest.mark.slow
async def test_a_crash_after_a_stderr_flood_quotes_its_end_and_logs_what_was_cut(agent, session_id, caplog):
    caplog.set_level(logging.INFO)
    end = "agent log line"
    agent.script([[{"stderr_flood": STDERR_FLOOD}, {"stderr": 1}, {"sleep": 1}, {"crash": 3}]])
    result = await run(agent, session_id, timeout=60)
    assert result.status == "failed"
    assert result.error == "acp: the agent exited during the turn (exit 3): " + "x" * (1000 - len(end)) + end
    cut = STDERR_FLOOD + len(end) - STDERR_KEPT
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("agent stderr:")]
    assert logged == [f"agent stderr: [{cut} bytes cut] " + "x" * (STDERR_KEPT - len(end)) + end]


@pytest.mark.parametrize("version", ["1", True, 1.5, 2, None])
async def test_a_bad_protocol_version_stops_before_any_session(agent, session_id, version):
    agent.script([[{"say": "never"}]], initialize={"protocolVersion": version, "agentCapabilities": HTTP})
    result = await run(agent, session_id)
    assert result.status == "failed"
    assert result.error.startswith("acp: the agent answered protocolVersion")
    assert agent.received("session/new") == []


@pytest.mark.slow
@pytest.mark.parametrize("capabilities", [{"sessionCapabilities": {"resume": {}}}, {"loadSession": True}])
async def test_a_resumed_run_reuses_the_agent_session(agent, session_id, capabilities):
    calls.clear()
    agent.script(
        [
            [{"tool": "add", "arguments": {"a": 5, "b": 5}}, {"crash": 9}],
            [{"tool": "add", "arguments": {"a": 5, "b": 5}}, {"say": "ten"}],
        ],
        capabilities={**HTTP, **capabilities},
    )
    first = await run(agent, session_id)
    assert first.status == "failed"
    second = await run(agent, session_id)
    assert second.status == "completed", second.error
    assert second.text == "ten"
    assert calls == [(5, 5)], "the finished tool call of the crashed turn is replayed, not run again"
    assert len(agent.received("session/new")) == 1
    assert len(agent.log("started")) == 2, "one agent process per flow run"
    method = "session/resume" if "sessionCapabilities" in capabilities else "session/load"
    (reopened,) = agent.received(method)
    first, again = agent.received("session/prompt")
    assert reopened["params"]["sessionId"] == first["params"]["sessionId"] == again["params"]["sessionId"]
    assert second.metrics.replayed_tool_calls == 1


async def test_the_style_s_session_meta_goes_with_the_new_and_the_resumed_session(agent, session_id):
    """An adapter builds its agent from the request that opens the session: claude-agent-acp
    reads its built-in tools and side requests from ``_meta``, a resumed session's too."""
    meta = {"claudeCode": {"options": {"tools": []}}}
    launch = agent.style.acp.model_copy(update={"session_meta": meta})
    style = agent.style.model_copy(update={"acp": launch})
    agent.script([[{"crash": 9}], [{"say": "ok"}]], capabilities={**HTTP, "sessionCapabilities": {"resume": {}}})
    for _ in range(2):
        client = create_cli_client(style=style, command=agent.command, transport=Transport.ACP, env=agent.env)
        result = await client.run("go", session_id=session_id)
    assert result.status == "completed", result.error
    (new,) = agent.received("session/new")
    (resumed,) = agent.received("session/resume")
    assert new["params"]["_meta"] == resumed["params"]["_meta"] == meta


@pytest.mark.slow
async def test_without_resume_or_load_a_fresh_session_gets_the_transcript(agent, session_id):
    agent.script([[{"crash": 9}], [{"say": "fresh"}]], capabilities=HTTP)
    assert (await run(agent, session_id, prompt="remember me")).status == "failed"
    second = await run(agent, session_id, prompt="remember me")
    assert second.status == "completed", second.error
    assert len(agent.received("session/new")) == 2
    assert "remember me" in agent.received("session/prompt")[1]["params"]["prompt"][0]["text"]


async def test_model_selection_prefers_the_config_option(agent, session_id):
    options = [{"id": "group", "options": [{"id": "engine", "category": "model", "currentValue": "a"}]}]
    agent.script([[{"say": "ok"}]], session={"configOptions": options})
    result = await run(agent, session_id, model="big-model")
    assert result.status == "completed", result.error
    (chosen,) = agent.received("session/set_config_option")
    assert chosen["params"]["configId"] == "engine" and chosen["params"]["value"] == "big-model"
    assert agent.received("session/set_model") == []


@pytest.mark.slow
async def test_model_selection_falls_back_to_set_model_then_fails_clearly(agent, session_id, tmp_path):
    agent.script([[{"say": "ok"}]])
    assert (await run(agent, session_id, model="m1")).status == "completed"
    assert agent.received("session/set_model")[0]["params"]["modelId"] == "m1"
    agent.script([[{"say": "ok"}]], set_model="missing")
    result = await run(agent, session_id + "-b", model="m2")
    assert result.status == "failed"
    assert result.error.startswith("acp: the agent has no model config option and no session/set_model")


@pytest.mark.slow
async def test_agents_without_http_mcp_get_the_stdio_bridge(agent, session_id):
    calls.clear()
    agent.script([[{"tool": "add", "arguments": {"a": 20, "b": 22}}, {"say": "bridged"}]], capabilities={})
    result = await run(agent, session_id)
    assert result.status == "completed", result.error
    (server,) = agent.received("session/new")[0]["params"]["mcpServers"]
    assert "type" not in server and server["args"][:3] == ["-m", "nexusflow", "mcp-bridge"]
    assert [e["text"] for e in agent.log("tool_result")] == ["42"]
    assert calls == [(20, 22)]


async def test_auto_picks_acp_when_the_agent_answers_and_logs_why(agent, session_id, caplog):
    agent.script([[{"say": "over acp"}]])
    result = await run(agent, session_id, transport=Transport.AUTO)
    assert result.text == "over acp"
    assert agent.received("initialize")


async def test_auto_falls_back_to_the_one_shot_transport(agent, session_id, fake):
    from nexusflow import AcpLaunch, CliStyle

    style = CliStyle(
        name="half",
        args=[],
        prompt_mode="stdin",
        verified="test",
        acp=AcpLaunch(args=["--acp"], verified="test"),
    )
    fake.script({"stdout": '{"content": "one-shot answer"}'}, {"stdout": '{"content": "one-shot answer"}'})
    client = create_cli_client(style=style, command=fake.command, transport=Transport.AUTO, env=agent.env)
    result = await client.run("hi", session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "one-shot answer"


def test_the_cwd_must_resolve_inside_the_workspace(agent, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "escape").symlink_to(tmp_path)
    with pytest.raises(AcpError, match="outside the workspace"):
        client_for(agent, workspace=workspace, cwd=workspace / "escape")
    client_for(agent, workspace=workspace, cwd=workspace)


async def test_explicit_acp_without_a_launch_is_an_error(fake, session_id):
    from nexusflow import CliStyles

    result = await create_cli_client(style=CliStyles.CLAUDE, command=fake.command, transport=Transport.ACP).run(
        "hi", session_id=session_id
    )
    assert result.status == "failed"
    assert result.error == 'acp: style "claude" speaks ACP through an adapter: pass its path as acp_command'


@tool
def approve_me(item: str) -> str:
    """Needs a yes first."""
    from nexusflow import current_answer, suspend

    answer = current_answer()
    if answer is None:
        return suspend(f"May I touch {item}?")
    calls.append((len(item), 0))
    return f"touched {item}"


@pytest.mark.slow
async def test_a_served_call_holds_the_agent_while_wait_for_answers(agent, session_id):
    from nexusflow import Answer

    calls.clear()

    async def yes(request):
        return Answer(id=request.id, ok=True)

    agent.script([[{"tool": "approve_me", "arguments": {"item": "db"}}, {"say": "done"}]])
    async with await Toolkit.load(tools=[approve_me]) as toolkit:
        result = await client_for(agent, wait_for=yes).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert [e["text"] for e in agent.log("tool_result")] == ["touched db"]
    assert result.metrics.suspensions == 1


@pytest.mark.slow
async def test_without_wait_for_an_acp_run_ends_pending_and_resumes_the_agent_session(agent, session_id):
    from nexusflow import Answer

    calls.clear()
    agent.script(
        [
            [{"tool": "approve_me", "arguments": {"item": "cache"}}, {"sleep": 30}, {"say": "never"}],
            [{"tool": "approve_me", "arguments": {"item": "cache"}}, {"say": "cleared"}],
        ],
        capabilities={**HTTP, "loadSession": True},
    )
    async with await Toolkit.load(tools=[approve_me]) as toolkit:
        client = client_for(agent)
        first = await client.run("go", toolkit, session_id=session_id)
        assert first.status == "pending", first.error
        assert first.request.prompt == "May I touch cache?"
        assert agent.log("cancelled"), "the held turn is cancelled"
        assert calls == []
        second = await client.resume(session_id, Answer(id=first.request.id, ok=True), toolkit)
    assert second.status == "completed", second.error
    assert second.text == "cleared"
    assert calls == [(5, 0)]
    (loaded,) = agent.received("session/load")
    assert loaded["params"]["sessionId"] == agent.received("session/prompt")[0]["params"]["sessionId"]


@pytest.mark.slow
async def test_a_session_the_agent_cannot_load_is_replaced_by_a_seeded_one_and_said_so(agent, session_id, caplog):
    import logging

    caplog.set_level(logging.INFO)
    agent.script([[{"say": "first"}], [{"say": "second"}]], capabilities={**HTTP, "loadSession": True})
    assert (await run(agent, session_id, prompt="remember me")).status == "completed"
    (agent.root / "sessions.json").unlink()
    again = await run(agent, session_id + "-x", prompt="x")
    assert again.status == "completed"
    agent.script([[{"crash": 9}], [{"say": "fresh"}]], capabilities={**HTTP, "loadSession": True})
    (agent.root / "prompt_count").unlink()
    assert (await run(agent, session_id + "-y", prompt="keep this")).status == "failed"
    (agent.root / "sessions.json").unlink()
    resumed = await run(agent, session_id + "-y", prompt="keep this")
    assert resumed.status == "completed", resumed.error
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "acp: the agent failed session/load" in said and "seeded with the transcript" in said
    assert "keep this" in agent.received("session/prompt")[-1]["params"]["prompt"][0]["text"]
