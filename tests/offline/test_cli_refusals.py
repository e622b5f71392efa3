"""What the `nexusflow` command answers before any run: a mistake in its arguments exits 2 (or
1) with one line naming it, ``--help`` lists the commands without importing them, and
``--version`` prints the package's. Its ``main`` in this process, with no server to reach."""

import re
import subprocess
import sys

import pytest

from helpers.command import nexusflow_here


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "--tools: expected module:function"),
        ("nexusflow_missing_module:x", "--tools: cannot import nexusflow_missing_module"),
        ("missing_file.py:x", "--tools: no such file: missing_file.py"),
    ],
)
def test_bad_tool_specs_are_usage_errors(spec, message, capsys):
    done = nexusflow_here(capsys, "run", "hi", "--tools", spec)
    assert done.returncode == 2
    assert message in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--style", "clod", "--command", "x"], 'cli: unknown style "clod"'),
        (["--style", "claude"], "cli: Command is required (path or name of the CLI binary)"),
        (["--style", "goose", "--command", "goose", "--model", "m"], 'cli: style "goose" takes no model'),
        (["--command", "claude"], "--command and --model need --style"),
    ],
)
def test_cli_style_mistakes_are_clear(args, message, capsys):
    done = nexusflow_here(capsys, "run", "hi", *args)
    assert done.returncode in (1, 2)
    assert message in done.stderr


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["run", "hi", "--transport", "bogus"], ['"bogus"', "--transport", '"auto"', '"acp"', '"cli"']),
        (["run", "hi", "--style", "clod", "--command", "x"], ['cli: unknown style "clod"', "claude", "goose"]),
        (["answer", "some-flow-run"], ["--approve"]),
        ([], ["a COMMAND is needed", "alerts"]),
        (["alerts"], ["alerts needs a COMMAND: install, list or remove"]),
        (
            ["alerts", "install", "--notify", "x/y", "--stalled", "5m30"],
            ["--stalled must be a duration from 10s to 365d"],
        ),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, names, capsys):
    done = nexusflow_here(capsys, *args)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("nexusflow: ")
    assert all(name in line for name in names), line


def test_help_lists_every_command_without_importing_them(capsys):
    done = nexusflow_here(capsys, "--help")
    assert done.returncode == 0, done.stderr
    listed = set(re.findall(r"^│ (\S+)", done.stdout, re.MULTILINE))
    assert {"run", "demo", "answer", "styles", "mcp-bridge"} <= listed
    probe = (
        "HEAVY = ('prefect', 'nexusflow.messages', 'nexusflow.transports');"
        "import sys, nexusflow.command; nexusflow.command.main(['--help']);"
        " print(sorted(m for m in sys.modules if m in HEAVY or m.startswith('nexusflow.command.')))"
    )
    help_only = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    loaded = help_only.stdout.splitlines()[-1]
    assert loaded == "['nexusflow.command.errors']", (
        "the commands, Prefect and the conversation's models (0.3 s of the start) load only when one runs"
    )


def test_version_prints_the_package_version(capsys):
    from importlib.metadata import version

    done = nexusflow_here(capsys, "--version")
    assert done.returncode == 0
    assert done.stdout.strip() == version("nexusflow")
