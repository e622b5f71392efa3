"""The work behind the tools: each reads or changes Prefect and the result storage and returns
at once. Nothing here waits for a run: a deployment's run is its worker's, and a run of the
server's own agent is a background process (``background``)."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import anyio
from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.exceptions import ObjectNotFound
from prefect.settings import get_current_settings
from prefect.states import Cancelling as CancellingState

from .._prefect import answer_claims as claims
from .._prefect.session_lock import Heartbeat
from .._prefect.storage import read_record
from .._support.liveness import gone, this_process
from ..client import new_session_id
from ..command.answer import answer_job, deployment_of
from ..command.invocation import Invocation, load_invocation
from ..config._checks import check_session_id
from ..ops.sessions import SessionInfo, duration, job_session, list_sessions, session_info
from ..state.store import SessionStore, read_status
from . import background
from .errors import (
    mcp_answer_too_long,
    mcp_answered_already,
    mcp_bad_wait,
    mcp_cancel_elsewhere,
    mcp_from_python,
    mcp_no_agent,
    mcp_no_deployment,
    mcp_no_run,
    mcp_not_running,
    mcp_not_waiting,
    mcp_other_request,
    mcp_prompt_needed,
    mcp_prompt_too_long,
    mcp_session_or_run,
    mcp_session_running,
    mcp_session_waiting,
)
from .views import Answered, Cancelling, RunState, RunView, StartedRun, WaitingFor

PROMPT_BOUND = 120_000
"""Bytes (UTF-8) of a prompt for the server's own agent, and of an answer's data and reason:
each travels as an argument of the background command, and Linux takes at most 128 KiB in one."""

WAIT_BOUND = 50.0
"""Seconds ``get_run`` waits at most: under the 60 s a client's tool call has by default
(Codex's ``tool_timeout_sec``), with room for the answer's trip."""
_LOOK_EVERY = 0.5

_ENDED: dict[StateType, RunState] = {
    StateType.COMPLETED: "completed",
    StateType.FAILED: "failed",
    StateType.CRASHED: "crashed",
    StateType.CANCELLED: "cancelled",
    StateType.CANCELLING: "cancelled",
}


@dataclass(frozen=True)
class Agent:
    """The agent ``nexusflow mcp`` was started with: ``nexusflow run``'s stored flags."""

    invocation: Invocation
    argv: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, invocation: Invocation) -> Agent:
        argv: list[str] = []
        for name, value in invocation.model_dump(mode="json", exclude_none=True).items():
            flag = "--" + name.replace("_", "-")
            argv += [f"{flag}={one}" for one in (value if isinstance(value, list) else [value])]
        return cls(invocation, argv)


def ui_url(flow_run_id: str | None) -> str | None:
    base = get_current_settings().ui_url
    return f"{base}/runs/flow-run/{flow_run_id}" if base and flow_run_id else None


async def start_run(
    agent: Agent | None,
    prompt: str | None,
    deployment: str | None,
    parameters: dict[str, Any] | None,
    session_id: str | None,
) -> StartedRun:
    session = check_session_id(session_id, "start_run") if session_id is not None else new_session_id()
    if session_id is not None:
        await _startable(session)
    if deployment is not None:
        return await _start_deployment(deployment, prompt, parameters or {}, session)
    if agent is None:
        raise mcp_no_agent()
    if prompt is None and session_id is None:
        raise mcp_prompt_needed()
    # Values after "=" and the prompt after "--": a prompt or a value that begins with a dash
    # ("--help") is never read as a flag of the command.
    argv = ["run", f"--session={session}", *agent.argv, *(["--", prompt] if prompt is not None else [])]
    if prompt is not None and len(prompt.encode("utf-8", "surrogatepass")) > PROMPT_BOUND:
        raise mcp_prompt_too_long(len(prompt.encode("utf-8", "surrogatepass")), PROMPT_BOUND)
    spawned = background.spawn(session, argv)
    flow_run_id = await background.held_by(spawned, session)
    return StartedRun(session_id=session, flow_run_id=flow_run_id, ui_url=ui_url(flow_run_id))


async def _startable(session: str) -> None:
    """A session that runs, or waits for an answer, is not started again."""
    info = await session_info(session)
    if info is not None and info.state == "running":
        raise mcp_session_running(session, info.flow_run_id)
    if info is not None and info.state == "waiting":
        state = await SessionStore().get(session)
        if state is not None and state.pending is not None:
            raise mcp_session_waiting(session, state.pending.id)


async def _start_deployment(name: str, prompt: str | None, parameters: dict[str, Any], session: str) -> StartedRun:
    given = {**parameters, "session_id": session, **({"prompt": prompt} if prompt is not None else {})}
    async with get_client() as client:
        try:
            found = await client.read_deployment_by_name(name)
        except (ObjectNotFound, ValueError) as exc:
            raise mcp_no_deployment(name) from exc
        run = await client.create_flow_run_from_deployment(found.id, parameters=given, name=f"agent-{session}")
    return StartedRun(session_id=session, flow_run_id=str(run.id), ui_url=ui_url(str(run.id)))


async def get_run(session_id: str | None, flow_run_id: str | None, wait: float = 0) -> RunView:
    """``wait``: seconds to wait for a running run to stop running (at most ``WAIT_BOUND``),
    so that a client without Tasks does not have to poll in a loop of its own."""
    if not 0 <= wait <= WAIT_BOUND:
        raise mcp_bad_wait(wait, WAIT_BOUND)
    deadline = time.monotonic() + wait
    while True:
        view = await _get_run(session_id, flow_run_id)
        if view.state != "running" or time.monotonic() >= deadline:
            return view
        await anyio.sleep(min(_LOOK_EVERY, max(0.0, deadline - time.monotonic())))


async def _get_run(session_id: str | None, flow_run_id: str | None) -> RunView:
    if (session_id is None) == (flow_run_id is None):
        raise mcp_session_or_run()
    async with get_client() as client:
        run = await _flow_run(client, flow_run_id) if flow_run_id is not None else None
        if run is not None:
            session = str(run.parameters.get("session_id") or job_session(str(run.id)))
        else:
            assert session_id is not None
            session = check_session_id(session_id, "get_run")
        info = await session_info(session)
        if info is None:
            run = run or await _latest_run(client, session)
            if run is None:
                raise mcp_no_run(flow_run_id or session)
            return _not_begun(session, run)
        latest = await _flow_run(client, info.flow_run_id) if info.flow_run_id else None
    return await _view(info, latest)


async def _flow_run(client: PrefectClient, flow_run_id: str) -> FlowRun | None:
    try:
        return await client.read_flow_run(UUID(flow_run_id))
    except (ValueError, ObjectNotFound):
        return None


async def _latest_run(client: PrefectClient, session: str) -> FlowRun | None:
    """A session's flow run before it wrote any record: a deployment's run not picked up yet."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    runs = await client.read_flow_runs(
        flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[f"agent-{session}"])),
        sort=FlowRunSort.EXPECTED_START_TIME_DESC,
        limit=1,
    )
    return runs[0] if runs else None


def _not_begun(session: str, run: FlowRun) -> RunView:
    kind = run.state.type if run.state is not None else StateType.SCHEDULED
    return RunView(
        session_id=session,
        flow_run_id=str(run.id),
        state=_ENDED.get(kind, "running"),
        flow_run_state=run.state_name,
        ui_url=ui_url(str(run.id)),
        error=run.state.message if run.state is not None and kind in _ENDED else None,
    )


async def _view(info: SessionInfo, run: FlowRun | None) -> RunView:
    view = RunView(
        session_id=info.session_id,
        flow_run_id=info.flow_run_id,
        state=info.state,
        flow_run_state=run.state_name if run is not None else None,
        ui_url=ui_url(info.flow_run_id),
        updated=info.updated,
        turns=info.turns,
        tool_calls=info.tool_calls,
        last_step=info.last_step,
        error=info.error,
    )
    if info.state in ("running", "crashed"):
        return view
    status = await read_status(info.session_id)
    if status is None:
        return view
    request = status.request
    waiting = (
        WaitingFor(
            request_id=request.id,
            kind=request.kind,
            prompt=request.prompt if isinstance(request.prompt, str) else str(request.prompt),
            tool=request.tool,
            arguments=request.arguments,
        )
        if request is not None and info.state == "waiting"
        else None
    )
    return view.model_copy(
        update={
            "waiting": waiting,
            "waits_for": status.waits_for if request is None else None,
            "text": status.text,
            "output": status.output,
            "usage": status.usage,
        }
    )


async def answer(
    session_id: str, request_id: str, approve: bool, data: Any = None, reason: str | None = None
) -> Answered:
    session = check_session_id(session_id, "answer")
    info = await session_info(session)
    if info is not None and info.state == "running":
        raise mcp_session_running(session, info.flow_run_id, "answered")
    state = await SessionStore().get(session)
    if state is None or state.pending is None:
        raise mcp_not_waiting(session, info.state if info is not None else "unknown")
    if state.pending.id != request_id:
        raise mcp_other_request(session, request_id, state.pending.id)
    if await load_invocation(session) is None:
        waiting = await deployment_of(state.waiting)
        if waiting is None:
            raise mcp_from_python(session)
        started = await answer_job(waiting, session, request_id, approve, data, reason)
        return _answered(session, request_id, approve, started)
    argv = ["answer", "--approve" if approve else "--deny", f"--request={request_id}"]
    if data is not None:
        argv.append(f"--data={json.dumps(data)}")
    if reason is not None:
        argv.append(f"--reason={reason}")
    argv += ["--", session]
    size = sum(len(one.encode("utf-8", "surrogatepass")) for one in argv)
    if size > PROMPT_BOUND:
        raise mcp_answer_too_long(size, PROMPT_BOUND)
    async with get_client() as client:
        claimed = await claims.claim(client, session, request_id)
        if claimed is None:
            raise mcp_answered_already(session, request_id)
        try:
            spawned = background.spawn(session, argv)
            flow_run_id = await background.held_by(spawned, session)
        finally:
            await claims.release(client, claimed)
    return _answered(session, request_id, approve, flow_run_id)


def _answered(session: str, request_id: str, approve: bool, flow_run_id: str | None) -> Answered:
    return Answered(
        session_id=session,
        request_id=request_id,
        approved=approve,
        flow_run_id=flow_run_id,
        ui_url=ui_url(flow_run_id),
    )


async def cancel_run(session_id: str | None, flow_run_id: str | None) -> Cancelling:
    view = await _get_run(session_id, flow_run_id)
    if view.state != "running" or view.flow_run_id is None:
        raise mcp_not_running(view.session_id, view.state)
    async with get_client() as client:
        run = await client.read_flow_run(UUID(view.flow_run_id))
        if run.deployment_id is not None:
            await client.set_flow_run_state(run.id, CancellingState(message="cancelled through nexusflow mcp"))
            return Cancelling(session_id=view.session_id, flow_run_id=view.flow_run_id, how="by its worker")
    beat = await read_record(Heartbeat, "sessions", view.session_id, "lease.json")
    mark = beat.process if beat is not None and beat.flow_run_id == view.flow_run_id else None
    here = this_process()
    if mark is None or here is None or mark.machine != here.machine or gone(mark):
        raise mcp_cancel_elsewhere(view.session_id, mark.pid if mark else None, mark.machine if mark else None)
    os.kill(mark.pid, signal.SIGTERM)
    return Cancelling(
        session_id=view.session_id, flow_run_id=view.flow_run_id, how=f"SIGTERM to its process {mark.pid}"
    )


async def sessions(state: list[str], older_than: str | None) -> list[SessionInfo]:
    return await list_sessions(state=state, older_than=duration(older_than) if older_than else None)


async def transcript(session_id: str) -> str:
    from ..command.show import runs_of, transcript_of

    session = check_session_id(session_id, "transcript")
    async with get_client() as client:
        found = await runs_of(client, session)
        said = await transcript_of(client, session, found) if found else None
    if said is None:
        raise mcp_no_run(session)
    return said
