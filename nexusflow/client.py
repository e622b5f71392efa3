"""The client: a transport plus the options every client shares, and ``run``."""

from __future__ import annotations

import re
import uuid
from typing import Any

from prefect.utilities.asyncutils import run_coro_as_sync
from pydantic import BaseModel, ConfigDict, Field

from ._runtime import PendingRun, pending_run
from .errors import SessionIdError, describe
from .flows import agent_run
from .hooks import AfterLlm, AfterTool, BeforeLlm, BeforeTool
from .messages import RunResult
from .toolkit import Toolkit
from .transports import Generate, TransportFactory, in_process_transport

_SESSION_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class ClientOptions(BaseModel):
    """Options every client takes, whatever its transport."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", frozen=True)

    model: str | None = None
    system_prompt: str | None = None
    max_turns: int = Field(default=20, ge=1)
    before_llm: BeforeLlm | None = None
    after_llm: AfterLlm | None = None
    before_tool: BeforeTool | None = None
    after_tool: AfterTool | None = None


def new_session_id() -> str:
    return uuid.uuid4().hex


def check_session_id(session_id: str) -> str:
    """Session ids become storage paths, so they are checked before anything runs."""
    if not _SESSION_ID.match(session_id) or session_id in (".", ".."):
        raise SessionIdError(session_id)
    return session_id


class Client:
    """Runs agent runs. Build one with ``create_in_process_client`` (or, for an agent CLI,
    ``create_cli_client``); every client has the same ``run``."""

    def __init__(self, transport: TransportFactory, options: ClientOptions) -> None:
        self.transport = transport
        self.options = options

    async def run(self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None) -> RunResult:
        """Run the ``agent_run`` flow (a subflow when called inside a flow) and return its
        result. Failures are reported in the result (``status="failed"``, ``error``),
        not raised. Run again with the same ``session_id`` to resume a crashed run."""
        session_id = check_session_id(session_id) if session_id is not None else new_session_id()
        token = pending_run.set(PendingRun(client=self, toolkit=toolkit if toolkit is not None else Toolkit()))
        try:
            state = await agent_run(prompt=prompt, session_id=session_id, return_state=True)
        finally:
            pending_run.reset(token)
        try:
            value = await state.aresult(raise_on_failure=False)
        except Exception as exc:
            value = exc
        if isinstance(value, RunResult):
            return value
        return RunResult(
            status="failed",
            error=describe(value) if isinstance(value, BaseException) else (state.message or state.name),
            session_id=session_id,
            flow_run_id=str(state.state_details.flow_run_id) if state.state_details.flow_run_id else None,
        )

    def run_sync(self, prompt: str, toolkit: Toolkit | None = None, *, session_id: str | None = None) -> RunResult:
        """``run`` for synchronous code, including inside a synchronous ``@flow``."""
        return run_coro_as_sync(self.run(prompt, toolkit, session_id=session_id))


def create_in_process_client(generate: Generate, *, model: str | None = None, **options: Any) -> Client:
    """A client whose model is a Python callable: ``generate(request) -> reply``, sync or
    async, where a reply is a ``ModelReply``, ``{"content": ...}`` or
    ``{"tool_calls": [{"id"?, "name", "arguments"}]}``."""
    return Client(in_process_transport(generate), ClientOptions(model=model, **options))
