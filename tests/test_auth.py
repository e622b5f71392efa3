"""A CLI that is not logged in, or whose login expired: recognised in its own words (one-shot)
or by ACP's auth-required error, failed with the pinned ``AuthRequired`` message, announced as
``nexusflow.auth.required``, and never retried."""

import json

import pytest
from test_events import events_of

from nexusflow import AuthRequired, Transport, create_cli_client, create_in_process_client
from nexusflow._secrets import register
from nexusflow.errors import RemoteError
from nexusflow.transports.acp.auth import not_logged_in
from nexusflow.transports.oneshot.style import CliStyles, builtin_style

from acp_fixtures import ScriptedAgent

pytestmark = pytest.mark.anyio

CLAUDE_SAID = "Not logged in · Please run /login"  # claude -p with an empty HOME, exit 1 (issue 42)
CLAUDE_PINNED = (
    "auth: claude is not logged in: Not logged in · Please run /login; run claude /login as the user the job runs as"
)
GEMINI_SAID = (
    "Please set an Auth method in your /home/job/.gemini/settings.json or specify one of the following environment"
    " variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA"
)
COPILOT_SAID = "Error: No authentication information found.\n\nCopilot can be authenticated with GitHub using ..."
CLAUDE_JSON = json.dumps(
    {"type": "result", "subtype": "success", "is_error": True, "num_turns": 1,
     "result": "Invalid API key · Please run /login", "total_cost_usd": 0, "usage": {}, "modelUsage": {}}
)  # fmt: skip


def test_the_message_is_pinned_redacted_and_capped():
    exc = AuthRequired("claude", CLAUDE_SAID, "claude /login")
    assert str(exc) == CLAUDE_PINNED
    secret = "sk-auth-test-" + "a" * 40
    register(secret)
    long = AuthRequired("codex", f"{secret} " + "x" * 2000 + f" {secret} refused", "codex login")
    assert secret not in str(long) and "*** refused; run codex login" in str(long) and len(long.shown) == 1000
    assert str(AuthRequired("devin", "no login")).endswith("run devin's login command as the user the job runs as")


def test_the_error_survives_a_round_trip_through_pickle():
    import pickle

    exc = pickle.loads(pickle.dumps(AuthRequired("claude", CLAUDE_SAID, "claude /login")))
    assert isinstance(exc, AuthRequired) and str(exc) == CLAUDE_PINNED


@pytest.mark.parametrize(
    ("style", "said", "login"),
    [
        ("claude", "Not logged in · Please run /login", True),
        ("claude", "Invalid API key · Please run /login", True),
        ("gemini", "Invalid auth method selected", True),  # exit 41 (shared notes, clis.md)
        # each real CLI with an empty HOME (docs/operating.md's table; tests/test_live.py)
        ("gemini", GEMINI_SAID, True),  # exit 41, on stderr as JSON
        ("gemini", "Please set an Auth method for the release notes in the wiki.", False),
        ("copilot", "Package extraction took 5911ms\n" + COPILOT_SAID, True),  # exit 1, stderr
        ("copilot", "Copilot answered: No authentication information found in the config file.", False),
        ("goose", "\n  error: No provider configured. Run 'goose configure' first.\n", True),  # exit 1, stdout
        ("goose", "error: No provider configured for the tracing exporter", False),
        ("claude", "API Error: 500 Internal server error", False),
        ("claude", "I could not log the event: the user is not logged into the wiki.", False),
    ],
)
def test_each_style_s_words_are_recognised(style, said, login):
    assert (builtin_style(CliStyles(style)).not_logged_in(said) is not None) == login


def test_goose_acp_s_words_in_the_error_s_string_data_are_recognised():
    """goose acp 1.52 with an empty HOME: -32603 "Internal error", its words a string in ``data``."""
    said = "Failed to resolve provider: Configuration value not found: GOOSE_PROVIDER"
    goose = builtin_style(CliStyles.GOOSE)
    login = not_logged_in(goose, RemoteError("session/new", -32603, "Internal error", said))
    assert login is not None and str(login) == (
        f"auth: goose is not logged in: acp: session/new failed: Internal error (-32603) {said};"
        " run goose configure as the user the job runs as"
    )
    assert not_logged_in(goose, RemoteError("session/new", -32603, "Internal error", "model not found")) is None


def test_every_built_in_style_names_its_login_command():
    for style in CliStyles:
        if style is not CliStyles.CUSTOM and style is not CliStyles.DEVIN:
            assert builtin_style(style).login, style


@pytest.mark.usefixtures("prefect_server")
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


@pytest.mark.usefixtures("prefect_server")
async def test_an_invalid_api_key_in_claude_s_json_answer_is_a_login_too(fake, session_id):
    fake.script({"stdout": CLAUDE_JSON, "exit": 1})
    result = await create_cli_client(CliStyles.CLAUDE, fake.command, "sonnet").run("go", session_id=session_id)
    assert result.error_type == "AuthRequired", result.error
    assert result.error == (
        "auth: claude is not logged in: Invalid API key · Please run /login;"
        " run claude /login as the user the job runs as"
    )


@pytest.mark.usefixtures("prefect_server")
async def test_another_exit_stays_a_cli_exit(fake, session_id):
    fake.script({"stderr": "Error: something else broke\n", "exit": 1})
    result = await create_cli_client(CliStyles.CLAUDE, fake.command, "sonnet").run("go", session_id=session_id)
    assert result.error_type == "CliError", result.error
    assert result.error == "cli: exit 1: Error: something else broke"


@pytest.mark.usefixtures("prefect_server")
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


@pytest.mark.usefixtures("prefect_server")
async def test_an_acp_agent_that_refuses_the_prompt_for_want_of_a_login(agent: ScriptedAgent, session_id):
    agent.script([[{"error": "Authentication required", "code": -32000}]])
    client = create_cli_client(
        agent.style, agent.command, transport=Transport.ACP, env=agent.env, retry_on="Authentication", model_retries=2
    )
    result = await client.run("go", session_id=session_id)
    assert result.error_type == "AuthRequired", result.error
    assert result.error is not None and result.error.startswith("auth: scripted is not logged in: acp: session/prompt")
    assert len(agent.received("session/prompt")) == 1, "never retried"


@pytest.mark.usefixtures("prefect_server")
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


@pytest.mark.usefixtures("prefect_server")
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
