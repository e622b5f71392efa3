"""Positional, chained cache keys: ``{session_id}/{step}/{kind}/{call}-{digest}``.

The position (session, step, call) is what makes a new flow run replay a crashed one; the
flow run id is deliberately not part of the key. The digest covers the step's own inputs
and the key of the step before it, so a change anywhere upstream (another prompt, another
tool result) re-executes everything after it, and a key costs the same at turn 200 as at
turn 2: each turn hashes only what is new since the previous one.
"""

from __future__ import annotations

from typing import Any

from prefect.context import TaskRunContext

from .._digest import digest


def step_key(session_id: str, step: int, kind: str, call: int, inputs: Any) -> str:
    return f"{session_id}/{step}/{kind}/{call}-{digest(inputs)}"


def chained_key(session_id: str, step: int, kind: str, call: int, upstream: str, inputs: Any) -> str:
    """The key of a step that follows ``upstream`` (the key of the step before it)."""
    return step_key(session_id, step, kind, call, {"upstream": upstream, "inputs": inputs})


def given_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    """Steps are keyed by the flow, which knows what came before them: see ``chained_key``."""
    return str(parameters["key"])
