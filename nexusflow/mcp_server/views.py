"""What the tools of ``nexusflow mcp`` return: typed, so a client sees their JSON schemas."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..messages import Usage

RunState = Literal["running", "waiting", "completed", "failed", "crashed", "cancelled"]


class StartedRun(BaseModel):
    """A run started (or an answered one gone on): poll it with ``get_run``."""

    session_id: str
    flow_run_id: str | None = Field(
        description="The flow run that runs it; None only when its process had not started one yet."
    )
    ui_url: str | None = Field(description="The flow run in the Prefect UI, where the server has one.")


class WaitingFor(BaseModel):
    """The one request a waiting run asks to be answered."""

    request_id: str = Field(description="Pass it to answer: an answer is bound to this request.")
    kind: Literal["approval", "input", "auth"]
    prompt: str
    tool: str | None = Field(default=None, description="The tool the answer lets run, or not.")
    arguments: str | None = Field(default=None, description="The arguments it would run with (secrets masked).")


class RunView(BaseModel):
    """Where a run stands, from Prefect and the result storage: the same answer from any
    server, before or after a restart."""

    session_id: str
    flow_run_id: str | None
    state: RunState
    flow_run_state: str | None = Field(
        default=None, description="The flow run's state in Prefect (Scheduled, Running, Paused, ...)."
    )
    ui_url: str | None = None
    updated: datetime | None = Field(
        default=None, description="Its last activity: its last run's end, or its running run's last heartbeat."
    )
    turns: int = 0
    tool_calls: int = 0
    last_step: str | None = Field(default=None, description="turn-N or tool-N: its last stored step.")
    waiting: WaitingFor | None = None
    waits_for: str | None = Field(default=None, description="What it waits for when it is no answer.")
    text: str | None = Field(default=None, description="The final answer, once completed.")
    output: Any = Field(default=None, description="The final answer in the run's output type, as JSON data.")
    usage: Usage | None = None
    error: str | None = None


class Answered(BaseModel):
    """An answer taken: the run goes on in ``flow_run_id`` (None until its process starts one)."""

    session_id: str
    request_id: str
    approved: bool
    flow_run_id: str | None
    ui_url: str | None = None


class Cancelling(BaseModel):
    """A cancel asked for: ``get_run`` shows ``cancelled`` once the run has stopped."""

    session_id: str
    flow_run_id: str
    how: str = Field(description="How it is stopped: by its worker, or by a signal to its process.")
