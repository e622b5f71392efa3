"""What a scheduled job sets without code: ``NEXUSFLOW_*`` environment variables.

Precedence, highest first: an argument (to ``create_*_client``, ``agent_job``'s parameters,
the command's flags), then the environment, then the default. The environment is read when
a client is made, so a job's deployment sets them in its work pool or ``prefect.yaml`` and
every client it makes follows. Which Prefect server a run records to is Prefect's own
setting, ``PREFECT_API_URL`` (see ``nexusflow._prefect.server``), not one of these."""

from __future__ import annotations

import json
import os
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import setting_not_a_pattern_list, setting_refused

ENV_PREFIX = "NEXUSFLOW_"

TOOL_CALLS = 64
"""Tool calls run per reply, by default: more than a model asks for in earnest, and few
enough that a reply of 10,000 calls never becomes 10,000 task runs."""
PARALLEL_TOOL_CALLS = 16
"""Tool calls of one reply that run at once, by default: each is a task run, a few requests
to Prefect's API, so more at once mostly wait on the server (1,000 at once took 17 s)."""
TOOL_RESULT = 2**20
"""Bytes of a tool result, by default: about 250,000 tokens, more than most models read in a
whole turn, and every later turn of the run carries it again (a CLI's prompt, each stored
step, the transcript artifact)."""
ARGUMENT_DEPTH = 64
"""Levels a tool call's arguments may nest, by default: what the one-shot envelope reads."""
MOST_ARGUMENT_DEPTH = 256
"""The most ``max_argument_depth`` may be: arguments are decoded and validated recursively,
within Python's recursion limit (1000 frames, a run's own stack included)."""

OnQuota = Literal["fail", "wait", "fallback"]
"""What a run does when its CLI says the subscription's window is spent (``QuotaExhausted``)."""

Wait = Literal["suspend", "pause", "none"]
"""How a run gets the answer to a request: ``suspend`` (the run waits without a process: a
deployment's), ``pause`` (the process waits), ``none`` (the run ends ``pending``)."""

CassetteMode = Literal["record", "replay", "auto"]
"""What a cassette does with a CLI's launches: record them (live), replay them (no process
starts), or ``auto``: replay when the cassette's file exists, else record."""

CLIENT_FIELDS = (
    "max_turns",
    "model_retries",
    "model_retry_wait",
    "output_retries",
    "on_quota",
    "max_quota_wait",
    "max_tool_calls",
    "max_parallel_tool_calls",
    "max_tool_result",
    "max_argument_depth",
)
"""Settings that are ``ClientOptions`` of the same name."""


class NexusflowSettings(BaseSettings):
    """``NEXUSFLOW_MAX_TURNS=40`` sets ``max_turns``, and so on for each field."""

    # A duration of inf or nan bounds nothing: refused by the variable's name.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", frozen=True, enable_decoding=False, allow_inf_nan=False
    )

    max_turns: int = Field(default=20, ge=1, description="Turns after which a run fails with MaxTurnsExceeded.")
    model_retries: int = Field(
        default=0, ge=0, description="Further attempts of a turn that failed with a TransientError (off by default)."
    )
    model_retry_wait: float = Field(
        default=1.0, ge=0, description="Seconds before the first retry; doubled each time, plus jitter, capped."
    )
    output_retries: int = Field(default=2, ge=0, description="How many invalid final answers are sent back.")
    on_quota: OnQuota = Field(
        default="fail", description="A spent quota window: fail, wait for its reset, or ask the fallback clients."
    )
    max_quota_wait: float = Field(
        default=21600.0, gt=0, description="Seconds of a quota wait after which the run fails instead."
    )
    max_tool_calls: int = Field(
        default=TOOL_CALLS, ge=1, description="Tool calls run per reply; each one past it is an error the model reads."
    )
    max_parallel_tool_calls: int = Field(
        default=PARALLEL_TOOL_CALLS, ge=1, description="Tool calls of one reply that run at once."
    )
    max_tool_result: int = Field(
        default=TOOL_RESULT,
        ge=1,
        description="Bytes (UTF-8) of a tool result; a larger one is an error the model reads.",
    )
    max_argument_depth: int = Field(
        default=ARGUMENT_DEPTH,
        ge=1,
        le=MOST_ARGUMENT_DEPTH,
        description="Nesting of a tool call's arguments; deeper is an error the model reads.",
    )
    transport: Literal["auto", "acp", "cli"] = Field(
        default="auto", description="How an agent CLI is driven: a warm ACP session, one launch a turn, or auto."
    )
    timeout: float = Field(default=300.0, gt=0, description="Seconds one CLI launch or one ACP turn may take.")
    retry_on: tuple[str, ...] = Field(
        default=(),
        description="Regular expressions (a JSON list: '[\"rate limit\"]') whose match makes a CLI failure transient.",
    )
    repair_budget: int = Field(default=2, ge=0, description="How often a malformed one-shot reply is sent back.")
    wait: Wait | None = Field(
        default=None,
        description="How a request is answered (suspend, pause, none); unset: a client ends pending, a job suspends.",
    )
    wait_timeout: float = Field(default=86400.0, gt=0, description="Seconds a suspend or pause waits for its answer.")
    served_idle_timeout: float = Field(
        default=5.0, gt=0, description="Seconds a connection to the served MCP endpoint stays open without the token."
    )
    served_max_unauthorised: int = Field(
        default=128, ge=1, description="Connections to the served MCP endpoint open at once without its token."
    )
    served_shutdown_timeout: int = Field(
        default=5, ge=0, description="Whole seconds the served MCP endpoint's requests in flight get at shutdown."
    )
    mcp_start_wait: float = Field(
        default=30.0,
        gt=0,
        description="Seconds nexusflow mcp's start_run (and answer) waits for its background run to hold its session.",
    )
    mcp_max_runs: int = Field(
        default=8,
        ge=1,
        description="Background processes (runs and answers) one nexusflow mcp server has running at once.",
    )
    debug: bool = Field(
        default=False,
        description="Tracebacks for expected failures too (a login missing, a quota spent), as Prefect logs them.",
    )
    cassette_mode: CassetteMode = Field(
        default="auto",
        description="A cassette whose mode is not given: record, replay (CI: a missing recording fails), or auto.",
    )

    @field_validator("retry_on", mode="before")
    @classmethod
    def _one_or_a_list(cls, value: object) -> object:
        if not isinstance(value, str) or not value.lstrip().startswith("["):
            return (value,) if isinstance(value, str) else value
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise setting_not_a_pattern_list() from None


def current_settings() -> NexusflowSettings:
    """Read afresh: a test or a job that sets a variable sees it in the next client."""
    try:
        return NexusflowSettings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = f"{ENV_PREFIX}{'_'.join(str(part) for part in first['loc']).upper()}"
        why = str(first["ctx"]["error"]) if first["type"] == "value_error" else first["msg"]
        raise setting_refused(name, why[:1].lower() + why[1:], first.get("input")) from None


def _from_environment() -> NexusflowSettings | None:
    """Nothing is read (0.02 ms a client) when no ``NEXUSFLOW_`` variable is set."""
    if not any(name.startswith(ENV_PREFIX) for name in os.environ):
        return None
    return current_settings()


def settings() -> NexusflowSettings:
    """The environment's settings, or the defaults."""
    return _from_environment() or NexusflowSettings.model_construct()


def environment_defaults(fields: tuple[str, ...]) -> dict[str, object]:
    """Of ``fields``, only those the environment sets: a caller's own defaults stay its own."""
    found = _from_environment()
    if found is None:
        return {}
    return {name: getattr(found, name) for name in fields if name in found.model_fields_set}
