"""The real agent CLIs from the npm registry (pinned in .ci/agents.json, installed by
.ci/install-agents), against the scripted model server on 127.0.0.1, and the installed
packages held to the versions docs/transports.md names (the fast tier holds the pins to the
same table: tests/offline/test_agent_pins.py). Locally a test skips when its binary is
absent, saying why; in CI it fails."""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel

from nexusflow import CliStyles, Toolkit, Transport, create_cli_client, tool
from nexusflow.testing import ScriptedReply
from nexusflow.testing.conformance import default_model, scripted_cli
from nexusflow.testing.server import tool_names
from nexusflow.transports.oneshot.style import builtin_style

from helpers.prefect_api import task_runs
from helpers.processes import group_members
from helpers.proxy_recorder import proxy_recorder
from live_agents import ADAPTERS, ONE_SHOT, agents_dir, binary, documented
from paths import EXAMPLES

pytestmark = pytest.mark.anyio

SHELL = {
    CliStyles.CLAUDE: ("Bash", {"command": "touch {marker}"}),
    CliStyles.CODEX: ("exec_command", {"cmd": "touch {marker}"}),
    CliStyles.GEMINI: ("run_shell_command", {"command": "touch {marker}"}),
    CliStyles.COPILOT: ("bash", {"command": "touch {marker}", "description": "touch a file"}),
    CliStyles.OPENCODE: ("bash", {"command": "touch {marker}", "description": "touch a file"}),
    CliStyles.GOOSE: ("shell", {"command": "touch {marker}"}),
}
ids = [style.value for style in ONE_SHOT]

ran: list[tuple[int, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append((a, b))
    return a + b


@pytest.mark.parametrize("style", ONE_SHOT, ids=ids)
def test_styles_verify_passes_for_each_installed_cli(style, tmp_path):
    """The one-shot transport end to end: a two-turn run whose first reply calls our tool
    through the envelope, exact final text, the model name reaching the server, the CLI's
    own tools off, and a model HTTP error failing the run (goose included); plus ACP. Each
    launch's and each agent's temporary folder is its own and goes with it: nothing is left
    in the system's (gemini wrote a report of every model error there, claude its probes)."""
    command = binary(ONE_SHOT[style])
    argv = [sys.executable, "-m", "nexusflow", "styles", "verify", "--style", style.value, "--command", command]
    if style in ADAPTERS:
        argv += ["--acp-command", binary(ADAPTERS[style])]
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(system_tmp)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    report = [line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert len(report) == 6 and all(line.startswith("PASS") for line in report), done.stdout
    assert sorted(path.name for path in system_tmp.iterdir()) == [], "left in the temporary folder"


def test_styles_verify_fails_precisely_for_a_binary_that_is_not_the_cli():
    done = subprocess.run(
        [sys.executable, "-m", "nexusflow", "styles", "verify", "--style", "claude", "--command", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 1
    assert "FAIL  one-shot tool call round trip" in done.stdout and "cli: empty reply" in done.stdout, done.stdout


def acp_client(style, env, home, **options):
    return create_cli_client(
        style,
        binary(ONE_SHOT[style]),
        options.pop("model", default_model(style, acp=True)),
        transport=options.pop("transport", Transport.ACP),
        acp_command=binary(ADAPTERS[style]) if style in ADAPTERS else None,
        env=env,
        workspace=home,
        cwd=home,
        timeout=options.pop("timeout", 180),
        **options,
    )


@pytest.mark.parametrize("style", ONE_SHOT, ids=ids)
async def test_acp_served_tool_runs_as_a_task_and_its_result_reaches_the_model(style):
    ran.clear()
    replies = [ScriptedReply.call("add", {"a": 20, "b": 22}), ScriptedReply.say("It is 42.")]
    async with scripted_cli(style, replies, acp=True) as (server, home, env):
        async with await Toolkit.load(tools=[add]) as toolkit:
            result = await acp_client(style, env, home).run("add", toolkit, session_id=f"live-{uuid.uuid4().hex}")
        turns = server.turns()
    assert result.status == "completed", result.error
    assert result.text.endswith("It is 42.")
    assert ran == [(20, 22)]
    assert any('"42"' in str(t.body) or "42" in str(t.body) for t in turns[1:]), "the tool result reached the model"
    names = [run.name for run in await task_runs(result.flow_run_id, expected=3)]
    assert "tool-0-add" in names and "turn-0" in names


@pytest.mark.parametrize("style", ONE_SHOT, ids=ids)
async def test_acp_rejects_the_agents_own_shell(style, caplog):
    caplog.set_level(logging.INFO)
    async with scripted_cli(style, [], acp=True) as (server, home, env):
        marker = Path(home) / "touched"
        name, arguments = SHELL[style]
        server.push(
            ScriptedReply.call(name, {k: v.format(marker=marker) for k, v in arguments.items()}),
            ScriptedReply.say("done"),
        )
        async with await Toolkit.load(tools=[add]) as toolkit:
            result = await acp_client(style, env, home).run("go", toolkit, session_id=f"live-{uuid.uuid4().hex}")
        assert not marker.exists(), "the agent's own shell must not act"
    assert result.status == "completed", result.error
    verdicts = [r.getMessage() for r in caplog.records if "acp: permission for" in r.getMessage()]
    if style is CliStyles.CODEX:
        assert verdicts == [], "codex-acp asks nothing: its shell is off (CODEX_CONFIG), its sandbox read-only"
    elif style is CliStyles.CLAUDE:
        assert verdicts == [], "claude's own tools are off (the style's session _meta): nothing to ask"
        said = json.dumps(server.turns()[-1].body["messages"][-1])
        assert "No such tool available: Bash" in said, said
    else:
        assert verdicts and all(v.endswith("rejected") for v in verdicts), verdicts


@pytest.mark.parametrize("style", ONE_SHOT, ids=ids)
async def test_acp_cancel_ends_the_turn_cancelled(style):
    """A turn past its timeout is cancelled and the agent ends it. That holds while the
    agent's model request is in flight; on a loaded machine an agent can take longer than
    the timeout just to send it (opencode did in CI), so the timeout grows until the
    request reached the model within it, counted from the run's start (before the agent's
    own start, so the request surely preceded the cancel)."""
    for seconds in (4, 16, 64):
        async with scripted_cli(style, [ScriptedReply.slow(300)] * 3, acp=True) as (server, home, env):
            async with await Toolkit.load(tools=[add]) as toolkit:
                client = acp_client(style, env, home, timeout=seconds)
                started = time.time()  # before the agent's start: the turn's timeout starts later
                result = await client.run("go", toolkit, session_id=f"live-{uuid.uuid4().hex}")
        sent = [request.at - started for request in server.turns()]
        if sent and sent[0] < seconds:
            break
    else:
        pytest.fail(f"{style.value} sent its model request {sent} s after the run's start, past {seconds} s")
    assert result.status == "failed"
    if style is CliStyles.GOOSE:
        # goose 1.52 leaves session/cancel unanswered while its model request is in flight
        expected = f"acp: timed out after {seconds * 1000}ms (the agent did not answer; its process group was killed)"
    else:
        expected = f"acp: timed out after {seconds * 1000}ms (the agent ended the turn: cancelled)"
    assert result.error == expected


@pytest.mark.parametrize("style", ONE_SHOT, ids=ids)
async def test_acp_resumed_run_reuses_the_agent_session(style, caplog):
    caplog.set_level(logging.INFO)
    session = f"live-{uuid.uuid4().hex}"
    async with scripted_cli(style, [ScriptedReply.say("first")] * 2, acp=True) as (_server, home, env):
        async with await Toolkit.load(tools=[add]) as toolkit:
            first = await acp_client(style, env, home).run("hello", toolkit, session_id=session)
            again = await acp_client(style, env, home).run("hello", toolkit, session_id=session)
    assert first.status == again.status == "completed", (first.error, again.error)
    said = " | ".join(
        r.getMessage() for r in caplog.records if "session" in r.getMessage() and "acp:" in r.getMessage()
    )
    assert RESUME[style] in said, said


async def test_claude_over_acp_sends_only_our_tools_and_only_the_turns_requests():
    """claude-agent-acp, given the style's session ``_meta``, starts claude without its 23
    built-in tools (65.7 KB a request before), and without the title request before the
    answer and the suggestion request after it; a resumed session too. Our tool still runs."""
    ran.clear()
    session = f"live-{uuid.uuid4().hex}"
    replies = [ScriptedReply.call("add", {"a": 20, "b": 22}), ScriptedReply.say("It is 42."), "Again."]
    async with scripted_cli(CliStyles.CLAUDE, replies, acp=True) as (server, home, env):
        async with await Toolkit.load(tools=[add]) as toolkit:
            prompt = "Add 20 and 22 with the add tool, please."
            first = await acp_client(CliStyles.CLAUDE, env, home).run(prompt, toolkit, session_id=session)
            again = await acp_client(CliStyles.CLAUDE, env, home).run("And once more?", toolkit, session_id=session)
    assert first.status == again.status == "completed", (first.error, again.error)
    assert first.text.endswith("It is 42.") and again.text.endswith("Again.")
    assert ran == [(20, 22)]
    model = [r for r in server.requests if r.api is not None and not checks_the_model(r.body)]
    assert len(model) == 3 and server.remaining == 0, [json.dumps(r.body)[-1500:] for r in model if r.side]
    offered = [tool_names(r.api, r.body) for r in model]
    assert all(len(names) == 1 and re.fullmatch(r"mcp__nexusflow_[0-9a-f]+__add", names[0]) for names in offered), (
        offered
    )


async def test_codex_one_shot_starts_without_reaching_the_network():
    """codex fetched its curated plugin repository at every start (``git ls-remote
    https://github.com/openai/plugins``, then api.github.com and chatgpt.com) until the
    style's ``--disable plugins``. Every connection beyond loopback goes to the recording
    proxy the run is given: none is tried, and the run still answers."""
    call = json.dumps({"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]})
    with proxy_recorder() as (proxy, asked):
        async with scripted_cli(CliStyles.CODEX, [call, '{"content": "It is 5."}']) as (_server, home, env):
            client = create_cli_client(
                CliStyles.CODEX, binary("codex"), "scripted-model", transport=Transport.CLI, env=env | proxy, cwd=home
            )
            async with await Toolkit.load(tools=[add]) as toolkit:
                result = await client.run("Add 2 and 3.", toolkit, session_id=f"live-{uuid.uuid4().hex}")
    assert result.status == "completed" and result.text == "It is 5.", result.error
    assert asked == [], asked


async def test_codex_acp_ends_on_the_sigterm_at_close_not_the_kill_a_second_later():
    """codex-acp exits 2 s after its stdin closes (it waits that long for its app-server,
    then sends it SIGTERM), so nexusflow killed its group after its 1 s grace. The style's
    ``terminate_on_close`` sends the group SIGTERM with the end of stdin: the adapter ends on
    that signal, not on the SIGKILL, and nothing of its group is left."""

    async def remember(kind, inputs, produce):
        return await produce(), False

    async with scripted_cli(CliStyles.CODEX, [], acp=True) as (_server, home, env):
        async with await Toolkit.load(tools=[add]) as toolkit:
            async with acp_client(CliStyles.CODEX, env, home).transport() as transport:
                await transport.begin(remember, toolkit.specs())
                process = transport._agent.process
    assert process.returncode == -signal.SIGTERM, process.returncode
    for _ in range(50):  # the group's SIGKILL is sent; its members may still be on their way out
        if not group_members(process.pid):
            break
        time.sleep(0.1)
    assert group_members(process.pid) == []


async def test_codex_over_acp_offers_our_tool_without_its_shell_and_agents():
    """codex-acp gives codex the style's ``CODEX_CONFIG`` as session config: its shell,
    image viewer, goals, sub-agents and web search are off (46.5 -> 30.2 KB a request); left
    are those codex has no switch for (MCP resources, ``request_user_input``). A tool call
    still works."""
    ran.clear()
    replies = [ScriptedReply.call("add", {"a": 20, "b": 22}), ScriptedReply.say("It is 42.")]
    async with scripted_cli(CliStyles.CODEX, replies, acp=True) as (server, home, env):
        async with await Toolkit.load(tools=[add]) as toolkit:
            result = await acp_client(CliStyles.CODEX, env, home).run(
                "add", toolkit, session_id=f"live-{uuid.uuid4().hex}"
            )
        turns = server.turns()
    assert result.status == "completed" and result.text.endswith("It is 42."), result.error
    assert ran == [(20, 22)]
    left = {"list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource", "request_user_input"}
    for turn in turns:
        names = set(tool_names(turn.api, turn.body)) - left
        assert len(names) == 1 and re.fullmatch(r"mcp__nexusflow_[0-9a-f]+\.add", names.pop()), names


def checks_the_model(body: dict) -> bool:
    """claude's check of a model id it does not know (``max_tokens`` 1, "Hi"), made once per
    process; here of the scripted recipe's ``ANTHROPIC_MODEL=scripted-model`` when the resumed
    session starts. A model id claude knows is not checked: no request a real run pays."""
    asked = body.get("messages") or [{}]
    return body.get("max_tokens") == 1 and len(asked) == 1 and "Hi" in json.dumps(asked[0].get("content"))


RESUME = {
    CliStyles.CLAUDE: "acp: resuming agent session",
    CliStyles.CODEX: "acp: resuming agent session",
    # Gemini loads the session when its first process wrote it to disk before exiting, and
    # fails session/load otherwise (we then seed a fresh session): both were seen, by timing.
    CliStyles.GEMINI: "acp: loading agent session",
    CliStyles.COPILOT: "acp: loading agent session",
    CliStyles.OPENCODE: "acp: resuming agent session",
    CliStyles.GOOSE: "acp: loading agent session",
}


async def test_auto_uses_acp_when_the_agent_answers_and_the_one_shot_path_otherwise(caplog):
    caplog.set_level(logging.INFO)
    async with scripted_cli(CliStyles.GEMINI, [ScriptedReply.say("over acp")], acp=True) as (_server, home, env):
        client = acp_client(CliStyles.GEMINI, env, home, transport=Transport.AUTO)
        result = await client.run("hi", session_id=f"live-{uuid.uuid4().hex}")
    assert result.status == "completed" and result.text == "over acp", result.error
    async with scripted_cli(CliStyles.CLAUDE, ['{"content": "one shot"}']) as (_server, home, env):
        client = create_cli_client(CliStyles.CLAUDE, binary("claude"), "scripted-model", env=env, cwd=home)
        result = await client.run("hi", session_id=f"live-{uuid.uuid4().hex}")
    assert result.text == "one shot", result.error
    choices = [r.getMessage() for r in caplog.records if r.getMessage().startswith("transport:")]
    assert choices[0].startswith("transport: ACP for gemini")
    assert choices[1].startswith("transport: one-shot CLI for claude, because")
    assert "adapter" in choices[1]


def test_the_scripted_cli_example_runs_a_real_cli_on_the_scripted_server():
    example = EXAMPLES / "scripted_cli.py"
    done = subprocess.run(
        [sys.executable, str(example), "claude", binary("claude")],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "completed 2 + 3 = 5 (the tool returned 5; 2 model turns)" in done.stdout, done.stdout


class Incident(BaseModel):
    title: str
    severity: int


INCIDENT_SCHEMA = json.dumps(Incident.model_json_schema(), ensure_ascii=False)


def strings(value: object) -> list[str]:
    """Every string in a recorded request body, however the CLI nested its prompt."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return []


async def test_typed_output_through_a_real_one_shot_cli():
    """The schema reaches the model in the envelope; an answer missing a field is sent back
    with pydantic's errors, and the repaired one is the run's output."""
    replies = ['{"content": {"title": "disk full"}}', '{"content": {"title": "disk full", "severity": 2}}']
    async with scripted_cli(CliStyles.CLAUDE, replies) as (server, home, env):
        client = create_cli_client(
            CliStyles.CLAUDE, binary("claude"), "scripted-model", transport=Transport.CLI, env=env, cwd=home
        )
        result = await client.run("triage", session_id=f"live-{uuid.uuid4().hex}", output_type=Incident)
        turns = server.turns()
    assert result.status == "completed", result.error
    assert result.output == Incident(title="disk full", severity=2) and result.metrics.output_repairs == 1
    assert len(turns) == 2
    assert all(any(INCIDENT_SCHEMA in text for text in strings(turn.body)) for turn in turns)
    assert any("severity: Field required" in text for text in strings(turns[1].body))


async def test_typed_output_through_a_real_acp_agent():
    """The schema reaches the agent in the prompt; the repair goes back in the same session."""
    replies = [ScriptedReply.say('{"title": "disk full"}'), ScriptedReply.say('{"title": "disk full", "severity": 2}')]
    async with scripted_cli(CliStyles.GEMINI, replies, acp=True) as (server, home, env):
        client = acp_client(CliStyles.GEMINI, env, home, output_type=Incident)
        result = await client.run("triage", session_id=f"live-{uuid.uuid4().hex}")
        turns = server.turns()
    assert result.status == "completed", result.error
    assert result.output == Incident(title="disk full", severity=2) and result.metrics.output_repairs == 1
    assert len(turns) == 2
    assert any(INCIDENT_SCHEMA in text for text in strings(turns[0].body))
    assert any("severity: Field required" in text for text in strings(turns[1].body))


QUOTA_READ = {style: name for style, name in ONE_SHOT.items() if name in ("claude", "codex", "gemini", "copilot")}


@pytest.mark.parametrize("style", QUOTA_READ, ids=[style.value for style in QUOTA_READ])
async def test_a_spent_quota_is_recognised_with_the_reset_the_cli_states(style):
    """The scripted server answers as each provider does for a spent window (a 429 with its
    quota body and headers, resetting in an hour): the real CLI gives up at once and the run
    fails with QuotaExhausted, not a CLI error. Codex states the reset (``try again at 4:41
    PM``, to the minute); claude, gemini and copilot, given an API key, state none."""
    replies = [ScriptedReply.quota_reached(3600, "scripted quota: usage limit reached")] * 4
    async with scripted_cli(style, replies) as (server, home, env):
        client = create_cli_client(style, binary(QUOTA_READ[style]), default_model(style), transport=Transport.CLI,
                                   env=env, cwd=home)  # fmt: skip
        started = datetime.now(UTC)
        result = await client.run("Say hello.", session_id=f"live-{uuid.uuid4().hex}")
        asked = len(server.turns())
    assert result.status == "failed" and result.error_type == "QuotaExhausted", result.error
    assert result.error is not None and result.error.startswith(f"quota: {style.value} limit reached (")
    assert asked == 1, "the CLI did not retry a spent window"
    if style == CliStyles.CODEX:
        reset = datetime.fromisoformat(result.error.split("(resets ", 1)[1].split(")", 1)[0])
        assert abs((reset - started).total_seconds() - 3600) < 120, result.error
    else:
        assert "(reset time unknown)" in result.error


@pytest.mark.parametrize(
    "style", [CliStyles.CLAUDE, CliStyles.CODEX, CliStyles.GEMINI], ids=["claude", "codex", "gemini"]
)
async def test_an_acp_agent_s_spent_quota_is_recognised(style):
    """Over ACP the agents refuse the prompt: claude's adapter and gemini say the 429 in the
    error's message, codex's adapter says "Internal error" with the words in its data. (Copilot
    over ACP answers the error as its reply text, which nexusflow cannot tell from an answer.)"""
    replies = [ScriptedReply.quota_reached(3600, "scripted quota: usage limit reached")] * 4
    adapter = ADAPTERS.get(style)
    async with scripted_cli(style, replies, acp=True) as (server, home, env):
        client = create_cli_client(style, binary(ONE_SHOT[style]), default_model(style, acp=True),
                                   transport=Transport.ACP, acp_command=binary(adapter) if adapter else None,
                                   env=env, workspace=home, cwd=home)  # fmt: skip
        result = await client.run("Say hello.", session_id=f"live-{uuid.uuid4().hex}")
        asked = len(server.turns())
    assert result.status == "failed" and result.error_type == "QuotaExhausted", result.error
    assert result.error is not None and result.error.startswith(f"quota: {style.value} limit reached (")
    assert asked == 1
    assert ("(resets " in result.error) == (style == CliStyles.CODEX), result.error


LOGGED_OUT = {
    "claude": (CliStyles.CLAUDE, Transport.CLI, "Not logged in · Please run /login"),
    "gemini": (CliStyles.GEMINI, Transport.CLI, "Please set an Auth method in your {home}/.gemini/settings.json"),
    "copilot": (CliStyles.COPILOT, Transport.CLI, "Error: No authentication information found."),
    "goose": (CliStyles.GOOSE, Transport.CLI, "error: No provider configured. Run 'goose configure' first."),
    "claude-agent-acp": (CliStyles.CLAUDE, Transport.ACP, "Authentication required"),
    "codex-acp": (CliStyles.CODEX, Transport.ACP, "Authentication required"),
    "gemini --acp": (CliStyles.GEMINI, Transport.ACP, "Gemini API key is missing or not configured."),
    "copilot --acp": (CliStyles.COPILOT, Transport.ACP, "Authentication required"),
    "goose acp": (CliStyles.GOOSE, Transport.ACP, "Configuration value not found: GOOSE_PROVIDER"),
}
"""What each real CLI or ACP agent says with an empty HOME and no credentials (the table in
docs/operating.md). Codex one-shot and opencode are not here: with no login they try the
network (codex unauthenticated, opencode its free built-in model), which says nothing of a login."""

SECRET_NAMED = re.compile(r"API_KEY|TOKEN|BASE_URL|_AUTH|CREDENTIALS|^GOOGLE_|^GEMINI_|^GOOSE_|^XDG_")


@pytest.mark.parametrize("case", LOGGED_OUT)
async def test_an_empty_home_is_a_login_required_in_the_cli_s_own_words(case, tmp_path, monkeypatch):
    """Each real CLI run as a user with no login at all (an empty HOME, no key or base-URL
    variable): the run fails with the pinned AuthRequired message quoting the CLI's words,
    and the CLI (or its ACP adapter) is launched once although ``retry_on`` matches them."""
    style, transport, words = LOGGED_OUT[case]
    for variable in [key for key in os.environ if SECRET_NAMED.search(key) and not key.startswith("PREFECT_")]:
        monkeypatch.delenv(variable)
    home = tmp_path / "home"
    home.mkdir()
    launches = tmp_path / "launches"
    adapter = ADAPTERS.get(style) if transport is Transport.ACP else None
    counted = tmp_path / "counted"
    counted.write_text(f'#!/bin/sh\necho launched >> "{launches}"\nexec "{binary(adapter or ONE_SHOT[style])}" "$@"\n')
    counted.chmod(0o755)
    acp = transport is Transport.ACP
    client = create_cli_client(
        style,
        binary(ONE_SHOT[style]) if adapter else str(counted),
        transport=transport,
        acp_command=str(counted) if adapter else None,
        env={"HOME": str(home)},
        cwd=str(home),
        workspace=str(home) if acp else None,
        timeout=60,
        retry_on=".",
        model_retries=2,
    )
    result = await client.run("Say hello.", session_id=f"live-{uuid.uuid4().hex}")
    said = words.format(home=home)
    login = builtin_style(style).login
    assert result.status == "failed" and result.error_type == "AuthRequired", result.error
    assert result.error is not None and result.error.startswith(f"auth: {style.value} is not logged in: "), result.error
    assert said in result.error and result.error.endswith(f"; run {login} as the user the job runs as"), result.error
    assert launches.read_text().splitlines() == ["launched"], "a login refused is launched once, never retried"


def test_the_installed_packages_are_the_pinned_ones_and_declare_the_documented_node():
    """What ``.ci/install-agents`` installed is what the docs name, down to each package's
    ``engines`` (the Node it declares, "none" when it declares none)."""
    binary("claude")  # skips (fails in CI) when the pins are not installed
    for package, (version, node) in documented().items():
        found = json.loads((agents_dir() / "node_modules" / package / "package.json").read_text())
        assert found["version"] == version, package
        assert found.get("engines", {}).get("node", "none") == node, package
