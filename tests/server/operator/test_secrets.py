"""Secrets we hand out come back in what a CLI or an ACP agent prints: every ``${VAR}`` value,
every token we mint and every secret-named value the CLI inherits must read ``***`` in errors,
states, logs, artifacts, events, the session's status and a cassette, here and on the Prefect
server. The masking itself (what is registered, the loggers, an MCP server's stderr) is tested
without a server (tests/offline/test_redaction.py)."""

import json
import logging
import os
import sys
import time
from uuid import UUID

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, LogFilter, LogFilterFlowRunId
from prefect.events.filters import EventFilter, EventResourceFilter

from nexusflow import CliStyles, Toolkit, ToolPolicy, Transport, create_cli_client, create_in_process_client, tool
from nexusflow._support.secrets import register
from nexusflow.testing import Cassette

from acp_fixtures import HTTP
from cli_fixtures import envelope_answer, envelope_calls, styled
from helpers.prefect_api import flow_run, task_runs
from paths import HELPERS

pytestmark = pytest.mark.anyio


LEAK = """
import os, sys
sys.stdin.read()
getattr(sys, sys.argv[1]).write(sys.argv[2].replace("{key}", os.environ["API_KEY"]))
sys.exit(int(sys.argv[3]))
"""
"""A CLI printing ``argv[2]`` on stream ``argv[1]`` with its API key in place of ``{key}``,
then exiting with ``argv[3]``."""


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "sk-" + os.urandom(16).hex()
    monkeypatch.setenv("MY_SECRET", value)
    return value


async def server_logs(flow_run_id: str, containing: str, timeout: float = 30) -> list[str]:
    """The run's log messages on the Prefect server, once one of them holds ``containing``
    (logs reach the server in batches)."""
    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(flow_run_id)])))
            messages = [log.message for log in logs]
            if any(containing in message for message in messages) or time.monotonic() > deadline:
                return messages
            await anyio.sleep(0.5)


async def test_a_traceback_a_run_logs_reaches_the_server_redacted(session_id):
    """Prefect's run loggers carry the redacting filter: the engine logs a failed task's
    traceback, the failure's cause with it, and no call site of ours redacts that."""
    value = "tb-" + os.urandom(12).hex()
    register(value)

    async def generate(request):
        raise RuntimeError(f"refused {value}")

    result = await create_in_process_client(generate).run("hi", session_id=session_id)
    assert result.status == "failed" and result.error == "model: generate raised RuntimeError: refused ***"
    logs = await server_logs(result.flow_run_id, containing="Traceback")
    assert any("Traceback" in message and "RuntimeError: refused ***" in message for message in logs)
    assert not any(value in message for message in logs)


@pytest.mark.parametrize(
    ("stream", "printed", "exit_code", "answer_field", "expected"),
    [
        ("stderr", "401 Unauthorized: key {key} rejected", 1, None, "cli: exit 1: 401 Unauthorized: key *** rejected"),
        (
            "stdout",
            "Error: invalid x-api-key {key}",
            0,
            "result",
            "cli: expected JSON output with a 'result' field, got: Error: invalid x-api-key ***",
        ),
        # The 1000 code point cap falls inside the key: redacting after the cut would leave its tail.
        ("stderr", "-" * 10 + "{key}" + "." * 995, 1, None, "cli: exit 1: " + ("-" * 10 + "***" + "." * 995)[-1000:]),
    ],
    ids=["exit-status", "json-answer", "capped"],
)
@pytest.mark.slow
async def test_a_cli_printing_its_key_fails_the_run_with_the_key_redacted_everywhere(
    secret, session_id, caplog, stream, printed, exit_code, answer_field, expected
):
    caplog.set_level(logging.INFO)
    fields = {"answer_field": answer_field} if answer_field else {}
    client = create_cli_client(
        CliStyles.CUSTOM,
        command=sys.executable,
        args=["-c", LEAK, stream, printed, str(exit_code)],
        prompt_mode="stdin",
        transport=Transport.CLI,
        env={"API_KEY": "${MY_SECRET}"},
        **fields,
    )
    result = await client.run("hi", session_id=session_id)
    assert result.status == "failed"
    assert result.error == expected
    assert secret[-6:] not in result.error

    state = (await flow_run(result.flow_run_id)).state
    (turn,) = await task_runs(result.flow_run_id, expected=1)
    logs = await server_logs(result.flow_run_id, containing="***")
    for text in [state.message, turn.state.message]:
        assert "***" in text and secret[-6:] not in text
    assert any("***" in message for message in logs)
    assert not any(secret[-6:] in message for message in logs)
    # The console has no line of this expected failure (the caller has it, issue 42), and never the key.
    assert secret[-6:] not in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("capabilities", [HTTP, {}], ids=["http", "stdio-bridge"])
async def test_an_acp_agent_printing_our_bearer_token_is_logged_redacted(agent, session_id, caplog, capabilities):
    caplog.set_level(logging.INFO)
    agent.script([[{"say": "fine"}]], capabilities=capabilities)
    launch = agent.style.acp.model_copy(update={"args": [str(HELPERS / "leaky_acp_agent.py")]})
    style = agent.style.model_copy(update={"acp": launch})
    client = create_cli_client(style=style, command=agent.command, transport=Transport.ACP, env=agent.env)
    result = await client.run("go", session_id=session_id)
    assert result.status == "completed", result.error

    (server,) = agent.received("session/new")[0]["params"]["mcpServers"]
    given = server["headers"] if "headers" in server else server["env"]
    (token,) = [entry["value"].removeprefix("Bearer ") for entry in given]
    printed = [record.getMessage() for record in caplog.records if "debug: mcpServers=" in record.getMessage()]
    assert printed and all("***" in line for line in printed)
    assert token not in caplog.text
    logs = await server_logs(result.flow_run_id, containing="debug: mcpServers=")
    assert any("debug: mcpServers=" in message and "***" in message for message in logs)
    assert not any(token in message for message in logs)


@pytest.fixture
def inherited(monkeypatch: pytest.MonkeyPatch) -> str:
    """An API key the CLI inherits from our environment, never given to nexusflow."""
    value = "sk-inherited-" + os.urandom(12).hex()
    monkeypatch.setenv("OPENAI_API_KEY", value)
    return value


@tool
def echo(text: str) -> str:
    """Say ``text`` back."""
    return text


@tool
def deploy(key: str) -> str:
    """Deploy with ``key`` (asks first)."""
    return "deployed"


async def test_an_inherited_secret_never_reaches_a_one_shot_cassette(inherited, fake, claude_on_path, tmp_path):
    fake.script(styled("claude", envelope_answer(f"your key is {inherited}")) | {"stderr": f"using {inherited}"})
    path = tmp_path / "c.json"
    client = create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI, cassette=Cassette(path, "record"))
    result = await client.run("What is my key?", session_id=f"inherited-{os.urandom(4).hex()}")
    assert result.status == "completed", result.error
    text = path.read_text()
    assert inherited not in text
    assert "your key is ***" in text and "using ***" in text


@pytest.mark.slow  # a run, then the server's logs and events, which arrive in batches
async def test_an_inherited_secret_the_model_echoes_is_masked_in_prefect_and_the_session_status(
    inherited, fake, claude_on_path, storage, session_id
):
    calls = [
        {"id": "c1", "name": "echo", "arguments": {"text": f"key {inherited}"}},
        {"id": "c2", "name": "deploy", "arguments": {"key": inherited}},
    ]
    fake.script(styled("claude", envelope_calls(*calls)))
    policies = {"deploy": ToolPolicy(approval="always")}
    client = create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI, policies=policies)
    async with await Toolkit.load(tools=[echo, deploy]) as toolkit:
        result = await client.run("Deploy with my key.", toolkit, session_id=session_id)
    assert result.status == "pending", result.error

    run = await flow_run(result.flow_run_id)
    runs = await task_runs(result.flow_run_id, expected=3)
    async with get_client() as prefect:
        found = await prefect.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(result.flow_run_id)]))
        )
        wanted = EventFilter(resource=EventResourceFilter(id=[f"nexusflow.session.{session_id}"]))
        deadline = time.monotonic() + 30
        while len(events := (await prefect.read_events(filter=wanted, limit=50)).events) < 2:
            assert time.monotonic() < deadline, "the run's events never arrived"
            await anyio.sleep(0.5)
    places = {
        "logs": await server_logs(result.flow_run_id, containing="***"),
        "state messages": [run.state.message, *(r.state.message for r in runs)],
        "artifacts": [artifact.data for artifact in found],
        "events": [event.payload for event in events],
        "status.json": (storage / "nexusflow" / "sessions" / session_id / "status.json").read_text(),
    }
    for where, held in places.items():
        text = json.dumps(held, default=str)
        assert inherited not in text, f"the inherited key is in the {where}"
        assert "***" in text, f"the echo never reached the {where}"
