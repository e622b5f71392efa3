"""The MCP Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663) for clients that declare
it: ``start_run`` answers with a task whose status follows the run; a run that waits for an
answer is ``input_required`` with one form to fill, answered by ``tasks/update``; its result is
``get_run``'s final view. A task is a record in its session's storage (``task.json``) and
everything else is read from Prefect and the result storage, so a task outlives the server
that made it, and a session pruned or forgotten takes its task with it."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any, Literal

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    RequestParams,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field, ValidationError

from .._prefect.server import use_server
from .._prefect.storage import read_record, write_record
from ..config._checks import check_session_id
from ..errors import NexusflowError, SessionIdError
from . import runs
from .errors import mcp_bad_task_data, mcp_cancel_waiting, mcp_no_task, mcp_task_gone_on
from .views import RunView

TASKS = "io.modelcontextprotocol/tasks"
POLL_MS = 2000
"""The polling interval a task suggests: a run's turn takes seconds, its answer a person."""
_RECORD = "task.json"

_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
TaskStatus = Literal["working", "input_required", "completed", "cancelled", "failed"]


class TaskRecord(BaseModel):
    """The task a ``start_run`` made of its session's run; a later ``start_run`` of the session
    writes its own (or none), and the earlier task has expired."""

    task_id: str
    created: datetime


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId", max_length=512)


class UpdateParams(TaskParams):
    input_responses: dict[str, dict[str, Any]] = Field(alias="inputResponses")


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Tasks only for a 2026-era request that declares them (the spec's MUST NOT otherwise)."""
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(extensions) and TASKS in (extensions or {})


async def forget_task(session_id: str) -> None:
    """A session started again outside a task: its earlier task has expired."""
    if await read_record(TaskRecord, "sessions", session_id, _RECORD) is not None:
        await write_record(TaskRecord(task_id="", created=_now()), "sessions", session_id, _RECORD)


class Tasks(Extension):
    identifier = TASKS

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskParams, _get, protocol_versions=_MODERN),
            MethodBinding("tasks/update", UpdateParams, _update, protocol_versions=_MODERN),
            MethodBinding("tasks/cancel", TaskParams, _cancel, protocol_versions=_MODERN),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        if params.name != "start_run" or not declared(ctx) or not isinstance(result, CallToolResult):
            return result
        if result.is_error or not result.structured_content:
            return result
        session = str(result.structured_content["session_id"])
        record = TaskRecord(task_id=f"{session}.{secrets.token_hex(8)}", created=_now())
        await write_record(record, "sessions", session, _RECORD)  # durable before the client hears of it
        view = RunView.model_validate({**result.structured_content, "state": "running"})
        return {"resultType": "task", **_task(record, view, "working")}


async def _get(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    require_client_extension(ctx, TASKS)
    record, view = await _task_and_view(params.task_id)
    return _detailed(record, view)


async def _update(ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> dict[str, Any]:
    """Each response to the request the run waits for answers it; a response to any other key
    (answered already, never asked, superseded) is ignored, as the spec asks."""
    require_client_extension(ctx, TASKS)
    _, view = await _task_and_view(params.task_id)
    for key, response in params.input_responses.items():
        if view.waiting is None or view.waiting.request_id != key:
            continue
        try:
            said = ElicitResult.model_validate(response)
        except ValidationError:
            continue
        if said.action == "cancel":  # dismissed without a choice: the request stays open
            continue
        content = said.content or {}
        approve = said.action == "accept" and content.get("approve", True) is not False
        given = content.get("reason")
        reason = given if isinstance(given, str) and given else None
        try:
            await runs.answer(view.session_id, key, approve, _data(key, content.get("data")), reason)
        except NexusflowError as exc:
            now = await runs.get_run(view.session_id, None)
            if now.waiting is not None and now.waiting.request_id == key:
                raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
    return {}


async def _cancel(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    """Cooperative, as the spec has it: a running run is cancelled, an ended one is left."""
    require_client_extension(ctx, TASKS)
    _, view = await _task_and_view(params.task_id)
    if view.waiting is not None:
        raise MCPError(code=INVALID_PARAMS, message=str(mcp_cancel_waiting(view.session_id, view.waiting.request_id)))
    if view.state == "running":
        try:
            await runs.cancel_run(view.session_id, None)
        except NexusflowError as exc:
            if (await runs.get_run(view.session_id, None)).state == "running":
                raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
    return {}


async def _task_and_view(task_id: str) -> tuple[TaskRecord, RunView]:
    use_server()
    session, _, _ = task_id.rpartition(".")
    try:
        check_session_id(session, "tasks")
        record = await read_record(TaskRecord, "sessions", session, _RECORD)
        if record is None:
            raise mcp_no_task(task_id)
        if record.task_id != task_id:
            raise mcp_task_gone_on(task_id, session)
        return record, await runs.get_run(session, None)
    except SessionIdError as exc:
        raise MCPError(code=INVALID_PARAMS, message=str(mcp_no_task(task_id))) from exc
    except NexusflowError as exc:
        raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc


def _detailed(record: TaskRecord, view: RunView) -> dict[str, Any]:
    if view.waiting is not None:
        return {**_task(record, view, "input_required"), "inputRequests": {view.waiting.request_id: _form(view)}}
    if view.state in ("running", "waiting"):
        return _task(record, view, "working")
    if view.state == "cancelled":
        return _task(record, view, "cancelled")
    # A run that failed or crashed is the tool's error, not the protocol's ("failed" is for
    # JSON-RPC errors): completed, with isError and get_run's view.
    failed = view.state in ("failed", "crashed")
    said = (view.error or view.state) if failed else (view.text or "")
    result = CallToolResult(
        content=[TextContent(type="text", text=said)],
        structured_content=view.model_dump(mode="json"),
        is_error=failed,
    )
    return {**_task(record, view, "completed"), "result": result.model_dump(mode="json", by_alias=True)}


def _task(record: TaskRecord, view: RunView, status: TaskStatus) -> dict[str, Any]:
    return {
        "taskId": record.task_id,
        "status": status,
        "statusMessage": _message(view),
        "createdAt": _iso(record.created),
        "lastUpdatedAt": _iso(max(_aware(record.created), _aware(view.updated or record.created))),
        "ttlMs": None,  # a task lives as long as its session: prune or forget ends both
        "pollIntervalMs": POLL_MS,
    }


def _message(view: RunView) -> str:
    if view.waiting is not None:
        return f"waiting for an answer to request {view.waiting.request_id} ({view.waiting.kind})"
    if view.waits_for is not None and view.state == "waiting":
        return f"waiting for {view.waits_for}"
    steps = f"{view.turns} turns, {view.tool_calls} tool calls"
    if view.state == "running":
        last = f", last step {view.last_step}" if view.last_step else ""
        return f"running (flow run {view.flow_run_id}): {steps} so far{last}"
    return f"{view.state} after {steps}" + (f": {view.error}" if view.error else "")


def _form(view: RunView) -> dict[str, Any]:
    """One form per request: approve (or deny), data for the tool, a reason the model reads."""
    waiting = view.waiting
    assert waiting is not None
    lines = [waiting.prompt]
    if waiting.tool is not None:
        lines.append(f"tool: {waiting.tool}" + (f" {waiting.arguments}" if waiting.arguments else ""))
    schema = {
        "type": "object",
        "properties": {
            "approve": {"type": "boolean", "title": "Approve", "default": True},
            "data": {"type": "string", "title": "Data (JSON) for the tool, if it asks for any"},
            "reason": {"type": "string", "title": "Reason the model reads"},
        },
        "required": ["approve"],
    }
    request = ElicitRequest(params=ElicitRequestFormParams(message="\n".join(lines), requested_schema=schema))
    return request.model_dump(mode="json", by_alias=True, exclude_none=True)


def _data(request_id: str, given: Any) -> Any:
    """The form's data field is JSON text, as ``nexusflow answer --data`` takes it."""
    if not isinstance(given, str) or not given.strip():
        return None
    try:
        return json.loads(given)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
        said = str(exc) if isinstance(exc, ValueError) else "nested too deep"
        raise MCPError(code=INVALID_PARAMS, message=str(mcp_bad_task_data(request_id, said))) from exc


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
