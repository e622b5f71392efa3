"""``agent_run``: one agent run as a Prefect flow, each turn and tool call a task run."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any
from uuid import UUID

from opentelemetry import propagate, trace
from opentelemetry.trace import Link
from prefect import Flow, flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.filesystems import WritableFileSystem
from prefect.runtime import flow_run

from .._prefect.storage import block_document_id, step_storage
from .._support import tracing
from ..errors import NoRuntimeError
from ..state.store import read_status
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
    links = await _resumed_links(session_id, run_id)
    with tracing.span("invoke_agent nexusflow", agent_attributes(session_id, run_id, live), links):
        try:
            outcome = await run.held(prompt, inputs)
        except Exception as exc:
            return await run.ended_by(exc)
        return run.finish(outcome)


def agent_attributes(session_id: str, run_id: str, live: LiveRun) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "nexusflow",
        "gen_ai.conversation.id": session_id,
        "gen_ai.request.model": live.options.model,
        "prefect.flow_run.id": run_id,
    }


TRACEPARENT_LABEL = "__OTEL_TRACEPARENT"
"""Where Prefect keeps a flow run's trace context (``prefect.telemetry.run_telemetry``)."""
_logger = logging.getLogger("nexusflow.tracing")

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


async def _resumed_links(session_id: str, run_id: str) -> list[Link]:
    """A link to the trace of the session's run before this one (the run it resumes, or goes
    on from), read from the label Prefect keeps its trace in; none when tracing is off, for a
    new session, or where that run kept no trace."""
    if tracing.tracer() is None:
        return []
    status = await read_status(session_id)
    if status is None or not status.flow_run_id or status.flow_run_id == run_id:
        return []
    try:
        async with get_client() as client:
            before = await client.read_flow_run(UUID(status.flow_run_id))
    except Exception as exc:  # a link is a courtesy: a run is never failed for one
        _logger.debug("tracing: the run before %s could not be read: %s", run_id, exc)
        return []
    traceparent = (before.labels or {}).get(TRACEPARENT_LABEL)
    if not isinstance(traceparent, str):
        return []
    context = trace.get_current_span(propagate.extract({"traceparent": traceparent})).get_span_context()
    if not context.is_valid:
        return []
    return [Link(context, {"nexusflow.link": "resumes", "prefect.flow_run.id": status.flow_run_id})]
