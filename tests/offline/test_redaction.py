"""What masks a secret, without a run: the values registered (every value we hand out, and the
secret-named values of an environment long enough to be keys), ``redact`` longest first, the
nexusflow loggers' messages, arguments and tracebacks, and an MCP server's stderr. Where the
masked secrets must not reach in a run, on the server: tests/server/operator/test_secrets.py."""

import logging
import os
import sys

import anyio
import pytest

# The modules that make the nexusflow.mcp and nexusflow.acp loggers, with their filter, as a
# run imports them: the loggers tested are those, not bare ones of the same name.
import nexusflow.toolkit.mcp
import nexusflow.transports.acp.connection  # noqa: F401
from nexusflow import Toolkit
from nexusflow._support.secrets import redact, register, register_environment

from paths import HELPERS

pytestmark = pytest.mark.anyio


def test_redact_masks_every_registered_value_longest_first():
    short, long = "tok-" + os.urandom(4).hex(), "-extended-" + os.urandom(4).hex()
    register(short)
    register(short + long)
    register("abc")  # too short to register: masking it would garble text
    assert redact(f"a {short}{long}, a {short}, abc") == "a ***, a ***, abc"


def test_only_secret_named_values_long_enough_to_be_keys_are_registered_from_an_environment():
    key, name = "sk-" + os.urandom(8).hex(), "Alice Example " + os.urandom(2).hex()
    register_environment({"X_API_KEY": key, "TOKENIZERS_PARALLELISM": "false", "GIT_AUTHOR_NAME": name, "HOME": "/r"})
    assert redact(f"{key} false /r {name}") == "*** false /r ***", "a flag stays; a name that says AUTH is masked"


@pytest.mark.parametrize("name", ["nexusflow", "nexusflow.mcp", "nexusflow.acp"])
def test_the_nexusflow_loggers_redact_messages_arguments_and_tracebacks(caplog, name):
    value = "key-" + os.urandom(8).hex()
    register(value)
    caplog.set_level(logging.INFO, logger=name)
    try:
        raise RuntimeError(f"refused {value}")
    except RuntimeError:
        logging.getLogger(name).exception("calling with %s", value)
    assert "calling with ***" in caplog.text and "RuntimeError: refused ***" in caplog.text
    assert value not in caplog.text


async def test_an_mcp_server_printing_its_token_on_stderr_is_logged_redacted(monkeypatch, caplog):
    token = "mcp-" + os.urandom(16).hex()
    monkeypatch.setenv("NF_MCP_TOKEN", token)
    caplog.set_level(logging.DEBUG, logger="nexusflow.mcp")
    code = (
        "import os, runpy, sys; print('connecting with ' + os.environ['SERVICE_TOKEN'], file=sys.stderr, flush=True);"
        " path = sys.argv[1]; sys.argv = [path, 'stdio']; runpy.run_path(path, run_name='__main__')"
    )
    server = {"command": sys.executable, "args": ["-c", code, str(HELPERS / "mcp_server.py")]}
    config = {"mcpServers": {"leaky": {**server, "env": {"SERVICE_TOKEN": "${NF_MCP_TOKEN}"}}}}
    async with await Toolkit.load(mcp_config=config) as toolkit:
        assert (await toolkit.call("multiply", {"a": 6, "b": 7})).content == "42"
        with anyio.fail_after(10):
            while "connecting with" not in caplog.text:
                await anyio.sleep(0.05)
    assert "[leaky] connecting with ***" in [record.getMessage() for record in caplog.records]
    assert token not in caplog.text
