"""A finished run becomes a test: ``nexusflow export SESSION --cassette FILE`` writes a cassette
from a session's recorded steps (no binary, no live run), and the same program replays it
offline with its tools really running; drift fails with the pinned diff; a session that does
not exist, still runs, or whose records lack what a cassette needs is refused."""

from __future__ import annotations

import functools
import json
import subprocess
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from nexusflow import (
    Answer,
    CassetteError,
    CassetteExportError,
    CliStyles,
    FunctionTool,
    ModelRequest,
    Toolkit,
    Transport,
    create_cli_client,
    create_in_process_client,
    tool,
)
from nexusflow.testing import Cassette, export_cassette, export_cassette_sync
from nexusflow.transports.cassette import ToolUse

from acp_fixtures import ScriptedAgent
from approvals import Approval
from cli_fixtures import envelope_answer, envelope_calls, styled
from helpers.command import nexusflow_here_awaited

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def here(capsys: pytest.CaptureFixture[str]) -> Callable[..., Awaitable[subprocess.CompletedProcess[str]]]:
    """The command's main in this process."""
    return functools.partial(nexusflow_here_awaited, capsys)


def transcript(messages) -> list[tuple[str, str | None, list[tuple[str, str]]]]:
    return [
        (m.role, getattr(m, "content", None), [(c.id, c.arguments) for c in getattr(m, "tool_calls", None) or []])
        for m in messages
    ]


async def deploy_program(client, session_id: str, deploy: FunctionTool):
    """The program under test: ask to deploy, get the approval, go on."""
    async with await Toolkit.load(tools=[deploy]) as toolkit:
        waiting = await client.run("Deploy web.", toolkit, session_id=session_id)
        assert waiting.status == "pending" and waiting.request is not None, waiting.error
        return await client.resume(session_id, Answer(id=waiting.request.id, ok=True), toolkit)


@pytest.mark.slow  # a run, its resume, the command (three exports) and the replay
async def test_a_pending_run_answered_is_exported_and_replays_offline(
    fake, claude_on_path, tmp_path, session_id, here, approval: Approval
):
    fake.script(
        styled("claude", envelope_calls({"name": "deploy", "arguments": {"service": "web"}})),
        styled("claude", envelope_answer("Deployed web.")),
    )
    live = await deploy_program(
        create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI), session_id, approval.deploy
    )
    assert live.status == "completed" and live.text == "Deployed web.", live.error
    assert approval.deployed == ["web"] and len(fake.calls()) == 2

    claude_on_path.unlink()  # the export needs no binary
    path = tmp_path / "exported.json"
    done = await here("export", session_id, "--cassette", str(path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == f"nexusflow: wrote 2 turns of session {session_id} to {path}\n"
    saved = json.loads(path.read_text())
    assert saved["version"] == 2, "an exported cassette is version 2"
    assert [(launch["turn"], sorted(launch["asked"])) for launch in saved["launches"]] == [
        (0, ["repair", "request"]),
        (1, ["repair", "request"]),
    ], "an exported launch asked no argv and no envelope prompt: the records never held them"
    first, second = (launch["reply"] for launch in saved["launches"])
    assert [call["function"]["name"] for call in first["tool_calls"]] == ["deploy"]
    assert first["usage"]["input_tokens"] == 10, "what the turn cost comes back on replay"
    assert second["content"] == "Deployed web."
    messages = saved["launches"][1]["asked"]["request"]["messages"]
    assert messages[-1] == {"role": "tool", "content": "deployed web", "tool_call_id": "call#1"}, messages

    approval.deployed.clear()
    cassette = Cassette(path)
    assert cassette.replaying
    replaying = create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI, cassette=cassette)
    replayed = await deploy_program(replaying, session_id + "-replay", approval.deploy)
    assert replayed.status == "completed" and replayed.text == "Deployed web.", replayed.error
    assert approval.deployed == ["web"], "the tool really runs on replay, after the approval"
    assert transcript(replayed.messages) == transcript(live.messages)
    assert cassette.unplayed() == [] and len(fake.calls()) == 2, "no process started"

    usage = await here("export", session_id)
    assert usage.returncode == 2 and len(usage.stderr.splitlines()) == 1, usage.stderr
    assert usage.stderr.startswith("nexusflow: ") and "--cassette" in usage.stderr, usage.stderr
    refused = await here("export", "never-ran-0", "--cassette", str(tmp_path / "none.json"))
    assert (refused.returncode, refused.stderr) == (
        1,
        "nexusflow: error: cassette export: no session 'never-ran-0' in the result storage\n",
    )
    assert not (tmp_path / "none.json").exists()


def adds(request: ModelRequest) -> dict[str, object] | str:
    results = [message.content for message in request.messages if message.role == "tool"]
    if not results:
        return {"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]}
    return f"It is {results[-1]}."


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def exported(path: Path, session_id: str, prompt: str = "What is 2+3?") -> None:
    """A two-turn session of the in-process model, exported: any client's turns export."""
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await create_in_process_client(adds).run(prompt, toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    await export_cassette(session_id, path)


def replaying(path: Path):
    return create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI, cassette=Cassette(path, "replay"))


async def test_an_exported_cassette_fails_with_the_pinned_diff_when_the_prompt_drifts(tmp_path, session_id):
    path = tmp_path / "c.json"
    await exported(path, session_id)
    async with await Toolkit.load(tools=[add]) as toolkit:
        same = await replaying(path).run("What is 2+3?", toolkit, session_id=session_id + "-same")
        drifted = await replaying(path).run("What is 2+4?", toolkit, session_id=session_id + "-drift")
    assert same.status == "completed" and same.text == "It is 5.", same.error
    assert drifted.status == "failed"
    header, diff = drifted.error.split(":\n", 1)
    assert header == f"cassette: {path} has no recording for turn 0; the nearest recording (turn 0) differs"
    changed = [line for line in diff.splitlines() if line.startswith(("-", "+"))]
    assert changed == [
        "--- recorded (turn 0)",
        "+++ asked (turn 0)",
        '-        "content": "What is 2+3?"',
        '+        "content": "What is 2+4?"',
    ], diff
    assert '"argv"' not in diff and '"prompt"' not in diff, "an exported launch is matched by its request alone"


async def test_an_exported_cassette_fails_at_the_turn_that_reads_a_changed_tool_result(tmp_path, session_id):
    path = tmp_path / "c.json"
    await exported(path, session_id)

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b + 1

    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await replaying(path).run("What is 2+3?", toolkit, session_id=session_id + "-2")
    assert result.status == "failed"
    header, diff = result.error.split(":\n", 1)
    assert header == f"cassette: {path} has no recording for turn 1; the nearest recording (turn 1) differs"
    assert [line for line in diff.splitlines() if line.startswith(("-  ", "+  "))] == [
        '-        "content": "5"',
        '+        "content": "6"',
    ], diff


def test_a_session_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(CassetteExportError) as caught:
        export_cassette_sync("never-ran-0", tmp_path / "c.json")
    assert str(caught.value) == "cassette export: no session 'never-ran-0' in the result storage"
    assert not (tmp_path / "c.json").exists()


async def test_a_running_session_is_refused(tmp_path, session_id):
    started, release = threading.Event(), threading.Event()

    @tool
    def slow() -> str:
        """Wait to be let go."""
        started.set()
        release.wait(60)
        return "let go"

    def calls_slow(request: ModelRequest) -> dict[str, object] | str:
        if any(message.role == "tool" for message in request.messages):
            return "done"
        return {"tool_calls": [{"name": "slow", "arguments": {}}]}

    outcome = []
    async with await Toolkit.load(tools=[slow]) as toolkit:

        async def run() -> None:
            outcome.append(await create_in_process_client(calls_slow).run("go", toolkit, session_id=session_id))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            assert await anyio.to_thread.run_sync(started.wait, 60)
            try:
                with pytest.raises(CassetteExportError) as caught:
                    await export_cassette(session_id, tmp_path / "c.json")
            finally:
                release.set()
    assert str(caught.value).startswith(f"cassette export: session {session_id!r} is running (flow run ")
    assert str(caught.value).endswith("); export it once its run has ended")
    assert outcome[0].status == "completed", outcome[0].error
    await export_cassette(session_id, tmp_path / "c.json")  # once ended, it exports
    assert len(json.loads((tmp_path / "c.json").read_text())["launches"]) == 2


async def test_a_turn_a_hook_rewrote_is_refused(tmp_path, session_id):
    def shorter(request: ModelRequest) -> ModelRequest:
        return request.model_copy(update={"messages": request.messages[-1:]})

    client = create_in_process_client(adds, before_llm=shorter)
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client.run("What is 2+3?", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    with pytest.raises(CassetteExportError) as caught:
        await export_cassette(session_id, tmp_path / "c.json")
    assert str(caught.value) == (
        f"cassette export: turn 0 of session {session_id!r} was changed by its before_llm hook; its record holds"
        " what the hook was given, not what the model was asked or said"
    )


async def test_records_kept_without_their_request_are_refused(tmp_path, storage, session_id):
    """A turn stored by a nexusflow that kept no request with the reply (as before export)."""
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await create_in_process_client(adds).run("What is 2+3?", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    (record,) = (storage / "nexusflow" / "sessions" / session_id / "steps" / "0" / "turn").iterdir()
    stored = json.loads(record.read_text())
    result = json.loads(stored["result"])  # what Prefect's JSON serializer wrote, as a string
    assert "asked" in result["data"], result
    del result["data"]["asked"]
    record.write_text(json.dumps(stored | {"result": json.dumps(result)}))
    with pytest.raises(CassetteExportError) as caught:
        await export_cassette(session_id, tmp_path / "c.json")
    assert str(caught.value) == (
        f"cassette export: turn 0 of session {session_id!r} was stored without its request (by an earlier"
        " nexusflow); run the session again to export it"
    )


def test_a_version_1_file_holds_no_exported_launch(tmp_path):
    path = tmp_path / "c.json"
    launch = {"turn": 0, "asked": {"request": {"messages": []}}, "reply": {"content": "hi"}, "seconds": 0.1}
    path.write_text(json.dumps({"version": 1, "launches": [launch]}))
    with pytest.raises(CassetteError, match="is not a cassette: .*a version 1 cassette holds no exported launch"):
        Cassette(path)
    path.write_text(json.dumps({"version": 2, "launches": [launch]}))
    assert Cassette(path).launches[0].reply == {"content": "hi"}
    path.write_text(json.dumps({"version": 2, "launches": [launch | {"reply": {"tool_calls": [{"id": "c"}]}}]}))
    with pytest.raises(CassetteError) as caught:
        Cassette(path)
    assert str(caught.value) == (
        f"cassette: {path} is not a cassette: launches.0.reply: Value error, the reply is not a model's reply:"
        " tool_calls.0.function: Field required"
    )


async def test_a_session_run_again_exports_its_latest_run_or_is_refused_when_that_is_not_clear(tmp_path, session_id):
    """Its first run's records stay beside the new ones: the turns that chain up are one run's,
    and of two first turns the one that asked the latest prompt is the latest run's."""
    path = tmp_path / "c.json"
    async with await Toolkit.load(tools=[add]) as toolkit:
        for prompt in ("What is 2+3?", "Add 2 and 3."):
            result = await create_in_process_client(adds).run(prompt, toolkit, session_id=session_id)
            assert result.status == "completed", result.error
        exported = await export_cassette(session_id, path)
        assert [launch.asked.request["messages"][0]["content"] for launch in exported.launches] == ["Add 2 and 3."] * 2

        again = await create_in_process_client(adds, system_prompt="Be brief.").run(
            "Add 2 and 3.", toolkit, session_id=session_id
        )
        assert again.status == "completed", again.error
    with pytest.raises(CassetteExportError) as caught:
        await export_cassette(session_id, path)
    assert str(caught.value) == (
        f"cassette export: session {session_id!r} holds the turns of more than one run from turn 0 on (its"
        " prompt or settings changed between runs); forget it and run it again to export one"
    )


added: list[tuple[int, int]] = []


@tool(name="add")
def counted_add(a: int, b: int) -> int:
    """Add two integers."""
    added.append((a, b))
    return a + b


ACP_TURNS = [
    [
        {"tool": "add", "arguments": {"a": 2, "b": 3}},
        {"say": "It is 5."},
        {
            "update": {
                "sessionUpdate": "usage_update",
                "used": 10,
                "size": 100,
                "cost": {"amount": 0.25, "currency": "USD"},
            }
        },
        {"usage": {"inputTokens": 12, "outputTokens": 5}},
    ],
    [
        {"say": "5"},
        {
            "update": {
                "sessionUpdate": "usage_update",
                "used": 20,
                "size": 100,
                "cost": {"amount": 0.4, "currency": "USD"},
            }
        },
        {"usage": {"inputTokens": 20, "outputTokens": 1}},
    ],
]
"""An ACP agent's two turns: it calls ``add`` and answers in words, then, asked to repair its
answer into an int, answers ``5``; each turn states its tokens and the session's cost."""


def acp_client(agent: ScriptedAgent, cassette: Cassette | None = None, command: str | None = None):
    return create_cli_client(
        agent.style,
        command or agent.command,
        "m1",
        transport=Transport.ACP,
        env=agent.env,
        cassette=cassette,
        output_type=int,
    )


async def acp_run(client, session_id: str, prompt: str = "What is 2+3?"):
    async with await Toolkit.load(tools=[counted_add]) as toolkit:
        return await client.run(prompt, toolkit, session_id=session_id)


@pytest.mark.slow  # a live agent process, the command, then the replay
async def test_an_acp_run_is_exported_and_replays_offline(agent, tmp_path, session_id, here):
    """The ACP session's cassette is rebuilt from its records alone: our client's side is
    ours, the agent's side comes from the stored turns (the tool call and its result, the
    answers, what each turn cost). Replayed with the agent gone: the same transcript, the
    same tool call (really run), the same output and cost."""
    agent.script(ACP_TURNS)
    added.clear()
    live = await acp_run(acp_client(agent), session_id)
    assert (live.status, live.output, added) == ("completed", 5, [(2, 3)]), live.error

    path = tmp_path / "acp.json"
    done = await here("export", session_id, "--cassette", str(path), "--style", "scripted")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        done.stderr
        == f"nexusflow: wrote 2 turns of session {session_id} to {path} (an ACP session of style scripted)\n"
    )
    saved = json.loads(path.read_text())
    assert (saved["version"], saved["launches"]) == (3, [])
    (session,) = saved["acp"]
    assert (session["style"], session["agent"]) == ("scripted", "exported")
    methods = [event["client"]["method"] for event in session["events"] if "method" in event.get("client", {})]
    assert methods == ["initialize", "session/new", "session/set_model", "session/prompt", "session/prompt"]
    tools = [event["tool"] for event in session["events"] if "tool" in event]
    assert tools == [{"name": "add", "arguments": {"a": 2, "b": 3}, "result": "5", "is_error": False}]
    started = len(agent.log("started"))

    added.clear()
    cassette = Cassette(path)
    assert cassette.replaying
    replayed = await acp_run(acp_client(agent, cassette, str(tmp_path / "no-such-agent")), session_id + "-replay")
    assert (replayed.status, replayed.output, replayed.text) == ("completed", 5, live.text), replayed.error
    assert added == [(2, 3)], "the tool really runs on replay"
    assert transcript(replayed.messages) == transcript(live.messages)
    spent, replay_spent = live.metrics.usage, replayed.metrics.usage
    assert (
        (replay_spent.input_tokens, replay_spent.output_tokens) == (spent.input_tokens, spent.output_tokens) == (32, 6)
    )
    assert replay_spent.cost_usd == pytest.approx(spent.cost_usd) == pytest.approx(0.4)
    assert cassette.unplayed_acp() == []
    assert len(agent.log("started")) == started, "no agent process started"


async def test_an_exported_acp_session_fails_with_the_pinned_diff_when_the_prompt_drifts(agent, tmp_path, session_id):
    agent.script(ACP_TURNS)
    assert (await acp_run(acp_client(agent), session_id)).status == "completed"
    path = tmp_path / "acp.json"
    with pytest.raises(CassetteExportError) as caught:
        await export_cassette(session_id, path)
    assert str(caught.value) == (
        f"cassette export: session {session_id!r} ran on ACP and its client's style is none of the built-in ones;"
        " name it (--style NAME)"
    )
    with pytest.raises(CassetteExportError) as caught:
        await export_cassette(session_id, path, style="claude")
    assert (
        str(caught.value)
        == f"cassette export: session {session_id!r} ran on ACP and its client's style is not 'claude'"
    )
    assert not path.exists()
    await export_cassette(session_id, path, style="scripted")

    missing = str(tmp_path / "no-such-agent")
    drifted = await acp_run(acp_client(agent, Cassette(path, "replay"), missing), session_id + "-drift", "What is 2+4?")
    assert drifted.status == "failed"
    header, diff = drifted.error.split(":\n", 1)
    assert header == f"cassette: {path} has no recording for turn 0; the recorded session/prompt (turn 0) differs"
    changed = [line for line in diff.splitlines() if line.startswith(("-", "+"))]
    assert changed == [
        "--- recorded (turn 0)",
        "+++ asked (turn 0)",
        '-          "What is 2+3?",',
        '+          "What is 2+4?",',
    ], diff


async def test_an_acp_session_whose_tool_record_is_gone_is_refused(agent, storage, tmp_path, session_id):
    """The exported agent says what each of its tool calls received: without the call's record
    it could not, and the export says which call rather than write a cassette that lies."""
    agent.script(ACP_TURNS)
    assert (await acp_run(acp_client(agent), session_id)).status == "completed"
    (record,) = (storage / "nexusflow" / "sessions" / session_id / "steps").glob("0/tool/*")
    record.unlink()
    path = tmp_path / "acp.json"
    with pytest.raises(CassetteExportError) as caught:
        await export_cassette(session_id, path, style="scripted")
    assert str(caught.value) == (
        f"cassette export: turn 0 of session {session_id!r} called add, whose record is not in the result"
        " storage; the exported agent could not say what it received"
    )
    assert not path.exists()


PENDING = "pending: May I deploy web? (the turn ends until it is answered)"


@pytest.mark.slow  # two live agent processes, then the replay of both runs: about 5 s
async def test_a_pending_acp_run_answered_is_exported_and_replays_offline(
    agent, tmp_path, session_id, approval: Approval
):
    """The agent's call of ``deploy`` suspends: the run ends pending, is answered, and the
    resumed run reopens the agent's session, whose call runs approved. The export holds the
    run that ended pending (the call told it is pending, the turn cancelled) and the whole
    conversation; the same program replays both runs with the agent gone."""
    agent.script(
        [
            [{"tool": "deploy", "arguments": {"service": "web"}}, {"sleep": 30}, {"say": "never"}],
            [{"tool": "deploy", "arguments": {"service": "web"}}, {"say": "Deployed web."}],
        ],
        capabilities={"mcpCapabilities": {"http": True}, "sessionCapabilities": {"resume": {}}},
    )

    def client(cassette: Cassette | None = None, command: str | None = None):
        options = {"transport": Transport.ACP, "env": agent.env, "cassette": cassette}
        return create_cli_client(agent.style, command or agent.command, **options)

    live = await deploy_program(client(), session_id, approval.deploy)
    assert (live.status, live.text, approval.deployed) == ("completed", "Deployed web.", ["web"]), live.error
    assert len(agent.received("session/resume")) == 1

    path = tmp_path / "pending.json"
    written = await export_cassette(session_id, path, style="scripted")
    pending, whole = written.acp
    assert [event.tool for event in pending.events if event.tool] == [
        ToolUse(name="deploy", arguments={"service": "web"}, result=PENDING, is_error=True)
    ]
    assert [event.client for event in pending.events if event.client][-1]["method"] == "session/cancel"
    assert [event.tool.result for event in whole.events if event.tool] == ["deployed web"]
    started = len(agent.log("started"))

    approval.deployed.clear()
    cassette = Cassette(path)
    replayed = await deploy_program(
        client(cassette, str(tmp_path / "no-such-agent")), session_id + "-replay", approval.deploy
    )
    assert (replayed.status, replayed.text) == ("completed", "Deployed web."), replayed.error
    assert approval.deployed == ["web"], "approved once, run once"
    assert transcript(replayed.messages) == transcript(live.messages)
    assert cassette.unplayed_acp() == []
    assert len(agent.log("started")) == started, "no agent process started"
