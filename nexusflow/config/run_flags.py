"""The flags of a run, in one table with one spelling: ``nexusflow run``'s flags, the
invocation it keeps for a session, and ``agent_job``'s parameters.

Each of the three keeps its own declaration, because what reads it reads a real one: Cyclopts
builds the flags and their help from ``run``'s signature and docstring, Prefect builds a
deployment's parameters (``prefect.yaml``, the UI's form) from ``agent_job``'s signature, and
mypy checks ``Invocation``'s fields where they are used. Generating them would hide all three
from those readers; tests/offline/test_options.py keeps each to this table instead."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunFlag:
    """One flag of a run, and where it is taken."""

    name: str
    """Its one spelling: the Python name, ``--kebab-case`` on the command line."""
    command: bool = True
    """A flag of ``nexusflow run``."""
    stored: bool = True
    """Kept in the session's invocation, so ``run --session ID`` goes on with it."""
    job: bool = True
    """A parameter of ``agent_job``."""
    was: str | None = None
    """The command's earlier spelling, still taken with a deprecation warning (the docs named it)."""


RUN_FLAGS = (
    RunFlag("tools"),
    RunFlag("mcp_config", was="mcp"),
    RunFlag("skills_dir", was="skills"),
    RunFlag("session", stored=False, job=False),
    RunFlag("script"),
    RunFlag("style"),
    RunFlag("style_file", job=False),
    RunFlag("command"),
    RunFlag("model"),
    RunFlag("transport"),
    RunFlag("acp_command"),
    RunFlag("timeout", job=False),
    RunFlag("system_prompt", was="system"),
    RunFlag("answer", stored=False),
    RunFlag("answer_data", stored=False, was="data"),
    RunFlag("answer_reason", stored=False, was="reason"),
    RunFlag("max_turns"),
    RunFlag("max_cost_usd", job=False),
    RunFlag("max_tokens", job=False),
    RunFlag("limit"),
    RunFlag("max_concurrent"),
    RunFlag("per_minute"),
    RunFlag("output_type"),
    RunFlag("session_id", command=False, stored=False),
    RunFlag("approval", command=False, stored=False),
    RunFlag("wait", command=False, stored=False),
    RunFlag("wait_timeout", command=False, stored=False),
)
"""In the order ``nexusflow run --help`` lists them. ``session`` (the command's) and
``session_id`` (the job's) are one thing spelled two ways, as they are across the library:
the command's ``--session`` is on every page of the docs."""
