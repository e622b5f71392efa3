"""A CLI that is not logged in, or whose login expired, recognised in its own words (one-shot)
or in an ACP agent's error, and the pinned ``AuthRequired`` message it becomes: what the runs
of tests/server/operator/test_auth.py fail with, checked without a run."""

import pytest

from nexusflow import AuthRequired
from nexusflow._support.secrets import register
from nexusflow.errors import RemoteError
from nexusflow.transports.acp.auth import not_logged_in
from nexusflow.transports.oneshot.style import CliStyles, builtin_style

from cli_fixtures import CLAUDE_PINNED, CLAUDE_SAID

GEMINI_SAID = (
    "Please set an Auth method in your /home/job/.gemini/settings.json or specify one of the following environment"
    " variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA"
)
COPILOT_SAID = "Error: No authentication information found.\n\nCopilot can be authenticated with GitHub using ..."


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
        # each real CLI with an empty HOME (docs/operating.md's table; tests/live/test_live.py)
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
