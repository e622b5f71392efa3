"""The `nexusflow` command's edges met before any run starts: an output type it cannot use and a
CLI binary that is not there exit 2 in one line, before a server or a flow is started; its
version; the ACP command stored as given. Its ``main`` in this process, with no server to
reach (the edges met in a run: tests/server/operator/test_command.py)."""

import sys
import time

import pytest

from helpers.command import nexusflow_here, one_line


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("{types}:Nope", "--output-type: {types}:Nope cannot be an output type: {types} has no 'Nope'"),
        ("{types}:LIMIT", "--output-type: 3 cannot be an output type: Unable to generate pydantic-core schema for 3."),
        (
            "no_such_module_x1:Report",
            "--output-type: no_such_module_x1:Report cannot be an output type: cannot import no_such_module_x1: "
            "ModuleNotFoundError: No module named 'no_such_module_x1'",
        ),
        ("Report", "--output-type: Report cannot be an output type: expected module:function or file.py:function"),
    ],
)
def test_an_unusable_output_type_exits_2_in_one_line(output_types, name, message, capsys):
    done = nexusflow_here(capsys, "run", "hi", "--output-type", name.format(types=output_types))
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    assert one_line(done).startswith(f"nexusflow: {message.format(types=output_types)}")


def test_a_missing_cli_binary_is_refused_before_any_server_or_flow_starts(capsys):
    started = time.monotonic()
    done = nexusflow_here(capsys, "run", "hi", "--style", "claude", "--command", "/no/such/binary")
    seconds = time.monotonic() - started
    assert done.returncode == 2
    assert one_line(done) == "nexusflow: --command: cli: command not found: /no/such/binary", "no flow logged a line"
    assert seconds < 15, f"took {seconds:.1f}s"


def test_version(capsys):
    from importlib.metadata import version

    done = nexusflow_here(capsys, "--version")
    assert (done.returncode, done.stdout) == (0, version("nexusflow") + "\n")


def test_an_acp_command_given_as_a_venv_interpreter_keeps_its_venv():
    """The stored command of a session stays the path given: resolving the symlink of
    ``.venv/bin/python`` would run the base interpreter, without the venv's packages."""
    from pathlib import Path

    from nexusflow.command.invocation import absolute_command

    venv_python = Path(sys.executable)
    assert venv_python.is_symlink(), "the tests run from a venv"
    assert absolute_command(str(venv_python)) == str(venv_python)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--http", "nope"],
            "nexusflow: mcp: --http takes PORT, HOST:PORT or [IPv6]:PORT (a port of 0 to 65535), not 'nope'",
        ),
        (
            ["--http", "127.0.0.1:70000"],
            "nexusflow: mcp: --http takes PORT, HOST:PORT or [IPv6]:PORT (a port of 0 to 65535), not '127.0.0.1:70000'",
        ),
        (
            ["--http", "0.0.0.0:0"],
            "nexusflow: mcp: serving on 0.0.0.0, beyond this machine, needs a token you chose (--token or "
            "NEXUSFLOW_MCP_TOKEN): a printed one would sit in a terminal's scrollback",
        ),
        (["--http", "0", "--token", " "], "nexusflow: mcp: the bearer token (--token or NEXUSFLOW_MCP_TOKEN) is empty"),
        (
            ["--style", "claude", "--command", "/no/such/binary"],
            "nexusflow: --command: cli: command not found: /no/such/binary",
        ),
    ],
)
def test_nexusflow_mcp_refuses_its_flags_before_it_serves(capsys, args, said):
    done = nexusflow_here(capsys, "mcp", *args)
    assert done.returncode == 2
    assert one_line(done) == said
