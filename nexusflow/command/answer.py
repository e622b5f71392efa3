"""``nexusflow answer``: a waiting run answered, however it was started."""

from __future__ import annotations

import sys
from typing import Annotated, Any
from uuid import UUID

from cyclopts import Parameter
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterName,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.exceptions import ObjectNotFound

from .._prefect.deployments import create_once
from .._prefect.server import use_server
from .._support.digest import digest
from ..config.waits import answer_flow_run
from ..flows.run import AWAITING
from ..messages import Answer
from ..state.store import SessionStore
from ._invoked import check_files, client_of, toolkit_of, tools_of
from ._shared import answer_json, checked_session_id, finish
from .errors import (
    usage_answer_other_request,
    usage_answer_without_decision,
    usage_answered_already,
    usage_flow_run_not_waiting,
    usage_no_flow_run,
    usage_session_from_python,
    usage_session_not_waiting,
    usage_tool_missing,
)
from .invocation import Invocation, load_invocation


async def answer_session(
    session: str, given: dict[str, Any], ok: bool, data: Any, reason: str | None, request: str | None = None
) -> int:
    """Go on with a pending session as it was started: on its stored invocation (``nexusflow
    run``), as a new run of its deployment (``agent_job``), or, for a model the command
    cannot rebuild (a Python ``generate``), by saying what to run instead. The answer is for
    the one call the session waits on (``request``, when given, must be that call's), and is
    used once."""
    use_server()
    stored = await load_invocation(session)
    state = await SessionStore().get(session)
    if state is None or state.pending is None:
        raise usage_session_not_waiting(session)
    if request is not None and request != state.pending.id:
        raise usage_answer_other_request(session, request, state.pending.id)
    if stored is None and not MODEL_FLAGS & given.keys():
        deployment = await deployment_of(state.waiting)
        if deployment is None:
            raise usage_session_from_python(session, state.pending.id, ok)
        started = await answer_job(deployment, session, state.pending.id, ok, data, reason)
        verdict = "approved" if ok else "denied"
        print(
            f"nexusflow: answered session {session} ({verdict}): it goes on in flow run {started} of its deployment",
            file=sys.stderr,
        )
        return 0
    invocation = (stored or Invocation()).over(given)
    client = client_of(invocation)
    check_files(invocation.mcp_config, invocation.skills_dir)
    kit = tools_of(invocation.tools)
    async with await toolkit_of(kit, invocation) as toolkit:
        needed = state.pending.tool
        if needed is not None and toolkit.get(needed) is None:
            raise usage_tool_missing(session, needed)
        reply = Answer(id=state.pending.id, ok=ok, data=data, reason=reason)
        result = await client.resume(session, reply, toolkit)
    return await finish(result, client)


MODEL_FLAGS = {"style", "style_file", "script"}
"""Flags that name the model: with one, an answer may go on with a session the command did not start."""


async def deployment_of(flow_run_id: str | None) -> FlowRun | None:
    """The waiting flow run, when a deployment ran it (an ``agent_job``)."""
    if flow_run_id is None:
        return None
    async with get_client() as client:
        try:
            run = await client.read_flow_run(UUID(flow_run_id))
        except ObjectNotFound:
            return None
    return run if run.deployment_id is not None else None


async def answer_job(waiting: FlowRun, session: str, request: str, ok: bool, data: Any, reason: str | None) -> str:
    """A new run of the job's deployment, with the job's parameters, its session and the
    answer; the id of that flow run. One per request, however many answer at once: the
    second is refused, naming the first's run."""
    parameters = {
        **waiting.parameters,
        "session_id": session,
        "answer": "approve" if ok else "deny",
        "answer_data": data,
        "answer_reason": reason,
    }
    assert waiting.deployment_id is not None
    async with get_client() as client:
        started, created = await create_once(
            client, waiting.deployment_id, parameters, f"nexusflow-answer-{digest(f'{session}:{request}')}"
        )
    if not created:
        raise usage_answered_already(session, request, str(started.id))
    return str(started.id)


async def answer(
    waiting: str,
    /,
    *,
    approve: Annotated[bool | None, Parameter(negative="--deny")] = None,
    data: str | None = None,
    reason: str | None = None,
    request: str | None = None,
) -> int:
    """Answer a run that waits, by its session id or its flow run id.

    A run that ended pending (started by nexusflow run, by agent_job, or from Python) goes on
    as it was started; a paused or suspended run (PrefectPause, DeploymentSuspension) is
    resumed by Prefect.

    Parameters
    ----------
    waiting
        The session id, or the id of the waiting flow run.
    approve
        Approve (--approve) or deny (--deny) the request; one of them is required.
    data
        JSON handed to the tool with the answer.
    reason
        Why, with the answer.
    request
        The id of the request answered: nothing is answered unless the session still waits
        for it (an answer meant for one request never answers the next).
    """
    if approve is None:
        raise usage_answer_without_decision()
    payload = answer_json(data)
    use_server()
    session, paused = await _waiting_for(waiting)
    if paused is not None:
        await answer_flow_run(paused, approve=approve, data=payload, reason=reason)
        print(f"nexusflow: answered flow run {paused}: {'approved' if approve else 'denied'}", file=sys.stderr)
        return 0
    return await answer_session(session, {}, approve, payload, reason, request)


async def _waiting_for(waiting: str) -> tuple[str, str | None]:
    """(the session, None) for a run that ended pending; (its session, the flow run) for one
    that Prefect pauses or suspends."""
    try:
        run_id: UUID | None = UUID(waiting)
    except ValueError:
        run_id = None
    async with get_client() as client:
        if run_id is not None:
            try:
                run: FlowRun | None = await client.read_flow_run(run_id)
            except ObjectNotFound:
                run = None  # a session id may read as a UUID too (``nexusflow run`` makes them so)
            if run is not None:
                state, session = run.state, str(run.parameters.get("session_id") or "")
                if state is not None and state.is_paused():
                    if state.name == AWAITING and session:
                        return session, None
                    return session, waiting
                raise usage_flow_run_not_waiting(waiting, state.name if state else None)
        session = checked_session_id(waiting)
        stored = await SessionStore().get(session)
        if stored is not None and stored.pending is not None:
            return session, None
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[f"agent-{session}"]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED])),
            ),
            sort=FlowRunSort.START_TIME_DESC,
            limit=1,
        )
        if runs:
            return session, str(runs[0].id)
    if run_id is not None and stored is None:
        raise usage_no_flow_run(waiting)
    raise usage_session_not_waiting(session)
