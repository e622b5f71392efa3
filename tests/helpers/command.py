"""The command as a test runs it without a process of its own."""

from __future__ import annotations

import subprocess

import pytest


def nexusflow_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """The command's ``main`` in this process: the parsing, the checks and the messages of the
    console script (``sys.exit(main())``, which the other tests run as a process), without
    paying a Python and a Prefect start-up per case."""
    from nexusflow.command import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["nexusflow", *args], code, out, err)
