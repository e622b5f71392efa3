"""Suspension: a tool call that needs a person (or something outside) before it can go on.

A tool returns ``suspend("May I delete these 40 files?")``; the run asks through its
``wait_for`` (or ends ``pending`` when it has none) and, when the answer is yes, runs the
tool once more with the answer available through ``current_answer()``.
"""

from __future__ import annotations

from contextvars import ContextVar
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from ..errors import NexusflowError
from ..messages import Answer, Request
from .errors import suspended_message


class Suspension(BaseModel):
    """What ``suspend`` returns: a tool's way of saying "not without an answer"."""

    request: Request


def suspend(
    prompt: str,
    *,
    kind: Literal["approval", "input", "auth"] = "approval",
    url: str | None = None,
    data: Any = None,
    expires_at: datetime | None = None,
) -> Suspension:
    """Return this from a tool (or a ``before_tool`` hook) to ask before going on."""
    return Suspension(request=Request(kind=kind, prompt=prompt, url=url, data=data, expires_at=expires_at))


answer_var: ContextVar[Answer | None] = ContextVar("nexusflow_answer", default=None)


def current_answer() -> Answer | None:
    """Inside a tool: the answer that let this call run again, or None on its first run."""
    return answer_var.get()


class Suspended(NexusflowError):
    """A call is waiting for an answer and the run has no ``wait_for``: the run ends
    ``pending`` with this request."""

    def __init__(self, request: Request) -> None:
        self.request = request
        super().__init__(suspended_message(request.prompt))


def outcome_text(request: Request, answer: Answer | None) -> str:
    """What the model reads when a suspended call does not run."""
    if answer is None:
        return f"unresolved: {request.prompt}"
    if answer.reason == "expired":
        return f"expired: {request.prompt}"
    return f"declined: {request.prompt}"
