"""``agent_run``: one agent run as a Prefect flow, each turn and tool call a task run."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any
from uuid import UUID

from prefect import Flow, flow, get_run_logger
from prefect.filesystems import WritableFileSystem
from prefect.runtime import flow_run

from .._prefect.storage import block_document_id, step_storage
from ..errors import NoRuntimeError
from ..tasks.live_run import LiveRun
from .run import FLOW_NAME, AgentRun, Ended, tool_runtime
from .steps import Steps


def preview(prompt: str, limit: int = 500) -> str:
    """What the UI shows of a prompt: flow-run parameters are capped at 512 KB by Prefect,
    so the prompt itself travels by reference (see ``SessionRecord``)."""
    return prompt if len(prompt) <= limit else prompt[:limit] + f"... ({len(prompt)} characters)"


@flow(name=FLOW_NAME, flow_run_name="agent-{session_id}", validate_parameters=True, persist_result=False)
async def agent_run(session_id: str, prompt: str = "", inputs: str | None = None, live: LiveRun | None = None) -> Ended:
    """Run the agent loop for the session's stored inputs (``inputs`` names them; ``prompt``
    is only a preview for the UI). Started by ``Client.run``, whose ``live`` carries the
    client and toolkit; a rerun with the same ``session_id`` replays finished steps, and one
    session runs in one flow run at a time.

    The result goes back to ``Client.run`` quoted and unpersisted: its steps are already
    stored, and Prefect walks a flow's return value for futures, object by object (a cost that
    grows with the run, ``benchmarks/README.md``), which a quote stops at the top. A run that
    ends waiting or failed returns its state instead (``Ended``), the result as its data."""
    if live is None:
        raise NoRuntimeError()
    logger = get_run_logger()
    run_id = str(flow_run.get_id())
    steps = Steps(session_id, await step_storage(), tool_runtime(live), live.options.task_config)
    run = AgentRun(session_id, run_id, live, steps, logger)
    try:
        outcome = await run.held(prompt, inputs)
    except Exception as exc:
        return await run.ended_by(exc)
    return run.finish(outcome)


AgentRunFlow = Flow[[str, str, str | None, LiveRun | None], Coroutine[Any, Any, Ended]]
"""``agent_run``'s type: its parameters and what it returns."""

_storing_in: dict[UUID, AgentRunFlow] = {}


def agent_run_storing_in(storage: WritableFileSystem) -> AgentRunFlow:
    """``agent_run`` with its result storage named (a block saved on the server, as
    ``step_storage`` gives it). Without one, Prefect asks the server for its default storage
    twice at each start, each time through a new HTTP client: two requests, and two TLS
    contexts built for a plain-HTTP API, in every run. Made once per storage block."""
    document = block_document_id(storage)
    if document is None:
        return agent_run
    found = _storing_in.get(document)
    if found is None:
        found = _storing_in[document] = agent_run.with_options(result_storage=storage)
    return found
