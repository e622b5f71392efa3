"""A run whose CLI is not logged in, or whose login expired: failed once with the pinned
``AuthRequired`` message, announced as ``nexusflow.auth.required`` on the server, and never
retried, for a one-shot CLI, an ACP agent, a custom style and a model of your own. The words
each CLI says, and the message itself, are tested without a server
(tests/offline/test_auth_words.py)."""

import json

import pytest

from nexusflow import AuthRequired, Transport, create_cli_client, create_in_process_client
from nexusflow.transports.oneshot.style import CliStyles

from acp_fixtures import ScriptedAgent
from cli_fixtures import CLAUDE_PINNED, CLAUDE_SAID
from helpers.prefect_api import events_of

pytestmark = pytest.mark.anyio

CLAUDE_JSON = json.dumps(
    {"type": "result", "subtype": "success", "is_error": True, "num_turns": 1,
     "result": "Invalid API key · Please run /login", "total_cost_usd": 0, "usage": {}, "modelUsage": {}}
)  # fmt: skip


@pytest.mark.parametrize(
    "reply",
    [{"stdout": CLAUDE_SAID + "\n", "exit": 1}, {"stderr": CLAUDE_SAID + "\n", "exit": 1}],
    ids=["stdout", "stderr"],
)
async def test_a_cli_not_logged_in_fails_the_run_once_with_the_pinned_error_and_the_event(fake, session_id, reply):
    fake.script(reply)
    client = create_cli_client(CliStyles.CLAUDE, fake.command, "sonnet", retry_on="logged in|login", model_retries=3)
    result = await client.run("go", session_id=session_id)
    assert result.status == "failed" and result.error_type == "AuthRequired", result.error
    assert result.error == CLAUDE_PINNED
    assert len(fake.calls()) == 1, "a login refused is not retried, whatever retry_on says"
    events = await events_of(session_id, expected=2)
    assert [event.event for event in events] == ["nexusflow.auth.required", "nexusflow.run.failed"]
    payload = events[0].payload
    assert (payload["style"], payload["session"], payload["said"]) == ("claude", session_id, CLAUDE_SAID)


async def test_an_invalid_api_key_in_claude_s_json_answer_is_a_login_too(fake, session_id):
    fake.script({"stdout": CLAUDE_JSON, "exit": 1})
    result = await create_cli_client(CliStyles.CLAUDE, fake.command, "sonnet").run("go", session_id=session_id)
    assert result.error_type == "AuthRequired", result.error
    assert result.error == (
        "auth: claude is not logged in: Invalid API key · Please run /login;"
        " run claude /login as the user the job runs as"
    )


async def test_another_exit_stays_a_cli_exit(fake, session_id):
    fake.script({"stderr": "Error: something else broke\n", "exit": 1})
    result = await create_cli_client(CliStyles.CLAUDE, fake.command, "sonnet").run("go", session_id=session_id)
    assert result.error_type == "CliError", result.error
    assert result.error == "cli: exit 1: Error: something else broke"


async def test_an_acp_agent_that_refuses_session_new_for_want_of_a_login(agent: ScriptedAgent, session_id):
    agent.script([], new_error={"error": "Authentication required", "code": -32000})
    client = create_cli_client(agent.style, agent.command, transport=Transport.ACP, env=agent.env)
    result = await client.run("go", session_id=session_id)
    assert result.status == "failed" and result.error_type == "AuthRequired", result.error
    assert result.error == (
        "auth: scripted is not logged in: acp: session/new failed: Authentication required (-32000);"
        " run scripted's login command as the user the job runs as"
    )
    assert agent.received("session/prompt") == []


async def test_an_acp_agent_that_refuses_the_prompt_for_want_of_a_login(agent: ScriptedAgent, session_id):
    agent.script([[{"error": "Authentication required", "code": -32000}]])
    client = create_cli_client(
        agent.style, agent.command, transport=Transport.ACP, env=agent.env, retry_on="Authentication", model_retries=2
    )
    result = await client.run("go", session_id=session_id)
    assert result.error_type == "AuthRequired", result.error
    assert result.error is not None and result.error.startswith("auth: scripted is not logged in: acp: session/prompt")
    assert len(agent.received("session/prompt")) == 1, "never retried"


async def test_a_custom_style_names_its_own_words_and_login(fake, session_id):
    fake.script({"stderr": "error: token expired, sign in again\n", "exit": 2})
    client = create_cli_client(
        CliStyles.CUSTOM,
        fake.command,
        args=[],
        prompt_mode="stdin",
        auth_patterns=["token expired"],
        login="mycli auth",
    )
    result = await client.run("go", session_id=session_id)
    assert result.error == (
        "auth: custom is not logged in: error: token expired, sign in again; run mycli auth as the user the job runs as"
    )


async def test_a_model_of_your_own_may_say_its_login_expired(session_id):
    calls = []

    def expired(request: object) -> str:
        calls.append(request)
        raise AuthRequired("my-api", "token expired", "my-api login")

    client = create_in_process_client(
        expired, model_retries=2, on_quota="fallback", fallback=[create_in_process_client(lambda r: "no")]
    )
    result = await client.run("go", session_id=session_id)
    assert result.error_type == "AuthRequired", result.error
    assert result.error == "auth: my-api is not logged in: token expired; run my-api login as the user the job runs as"
    assert len(calls) == 1, "no retry, and no fallback: on_quota is not asked"
