"""The Prefect events a run emits, so an Automation can act on them ("notify me when a run
waits for approval"). Each is about the session (``nexusflow.session.<id>``), related to
its flow run and, for a tool's events, to the tool (``nexusflow.tool.<name>``)."""

from __future__ import annotations

from typing import Any

from prefect.events import emit_event

from .._support.secrets import redact, redact_all
from ..config.waits import DeploymentSuspension, PrefectPause, answer_hint
from ..errors import AuthRequired, BudgetExceeded, QuotaExhausted
from ..messages import Request, RunResult, ToolCall
from ..tasks.shown import shown


def answer_command(wait_for: object, session_id: str, flow_run_id: str) -> str | None:
    """The command that answers a request under this ``wait_for``: the paused or suspended
    flow run's, or (no ``wait_for``: the run ends pending) the session's; none for a wait
    the world answers (an event, a condition)."""
    if isinstance(wait_for, PrefectPause | DeploymentSuspension):
        return answer_hint(flow_run_id)
    if wait_for is None:
        return f"nexusflow answer {session_id} --approve|--deny"
    return None


ANNOUNCED = (AuthRequired, QuotaExhausted)
"""Failures an event of their own announced first (``nexusflow.auth.required``,
``nexusflow.quota.exhausted``): their ``nexusflow.run.failed`` carries the resource label
``nexusflow.announced: yes``, so that an alert on failures tells each fault once."""


def announced(failure: BaseException | None) -> bool:
    """Whether an event of its own announced this failure first: known by its class, so a
    subclass is announced as its base is."""
    return isinstance(failure, ANNOUNCED)


def run_ended(result: RunResult, failure: BaseException | None = None) -> None:
    """``nexusflow.run.completed``, ``.failed`` or ``.pending``; a run its budget stopped
    also emits ``nexusflow.budget.exceeded``. ``failure`` is what a failed run failed with."""
    payload: dict[str, Any] = {
        "status": result.status,
        "error": result.error,
        "metrics": result.metrics.model_dump(mode="json"),
    }
    if result.request is not None:
        payload["request"] = _request(result.request)
    labels = {"nexusflow.announced": "yes" if announced(failure) else "no"}
    _emit(f"nexusflow.run.{result.status}", result.session_id, result.flow_run_id, None, payload, labels)
    if isinstance(failure, BudgetExceeded):
        _emit("nexusflow.budget.exceeded", result.session_id, result.flow_run_id, None, {"error": result.error})


def quota_exhausted(session_id: str, flow_run_id: str, exc: QuotaExhausted, policy: str, then: str) -> None:
    """``nexusflow.quota.exhausted``: a CLI said its subscription's window is spent."""
    resets = exc.resets_at.isoformat(timespec="seconds") if exc.resets_at is not None else None
    payload = {"style": exc.style, "resets_at": resets, "policy": policy, "then": then, "error": str(exc)}
    _emit("nexusflow.quota.exhausted", session_id, flow_run_id, None, payload)


def auth_required(session_id: str, flow_run_id: str, exc: AuthRequired) -> None:
    """``nexusflow.auth.required``: a CLI is not logged in, or its login expired; the run fails."""
    payload = {"style": exc.style, "session": session_id, "said": exc.shown, "login": exc.login, "error": str(exc)}
    _emit("nexusflow.auth.required", session_id, flow_run_id, None, payload)


def tool_failed(session_id: str, flow_run_id: str, step: int, call: ToolCall, error: str) -> None:
    payload = {"step": step, "tool": call.name, "arguments": shown(call.arguments), "error": shown(error)}
    _emit("nexusflow.tool.failed", session_id, flow_run_id, call.name, payload)


def suspension_requested(session_id: str, flow_run_id: str, request: Request, answer: str | None) -> None:
    _emit(
        "nexusflow.suspension.requested",
        session_id,
        flow_run_id,
        request.tool,
        {**_request(request), "answer": answer},
    )


def _request(request: Request) -> dict[str, Any]:
    return {
        "id": request.id,
        "kind": request.kind,
        "prompt": redact(request.prompt),
        "tool": request.tool,
        "arguments": shown(request.arguments or ""),
    }


def _emit(
    event: str,
    session_id: str,
    flow_run_id: str | None,
    tool: str | None,
    payload: dict[str, Any],
    labels: dict[str, str] | None = None,
) -> None:
    related = []
    if flow_run_id:
        related.append({"prefect.resource.id": f"prefect.flow-run.{flow_run_id}", "prefect.resource.role": "flow-run"})
    if tool:
        related.append({"prefect.resource.id": f"nexusflow.tool.{tool}", "prefect.resource.role": "tool"})
    resource = {
        "prefect.resource.id": f"nexusflow.session.{session_id}",
        "prefect.resource.name": session_id,
        **(labels or {}),
    }
    emit_event(event, resource=resource, related=related, payload=redact_all(payload))
