"""Positional, chained cache keys: ``nexusflow/sessions/{session_id}/steps/{step}/{kind}/{call}-{digest}``,
under the session's prefix of the result storage (its other records live beside them).

The position (session, step, call) is what makes a new flow run replay a crashed one; the
flow run id is deliberately not part of the key. The digest covers the step's own inputs
and the key of the step before it, so a change anywhere upstream (another prompt, another
tool result) re-executes everything after it, and a key costs the same at turn 200 as at
turn 2: each turn hashes only what is new since the previous one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext

from .._prefect.storage import steps_prefix
from .._support.digest import digest


def step_key(session_id: str, step: int, kind: str, call: int, inputs: Any) -> str:
    return f"{steps_prefix(session_id)}/{step}/{kind}/{call}-{digest(inputs)}"


def chained_key(session_id: str, step: int, kind: str, call: int, upstream: str, inputs: Any) -> str:
    """The key of a step that follows ``upstream`` (the key of the step before it)."""
    return step_key(session_id, step, kind, call, {"upstream": upstream, "inputs": inputs})


@dataclass
class PositionalKey(CachePolicy):
    """The cache policy of every nexusflow step: the key the flow computed and passed as
    the step's ``key`` parameter (it knows what came before the step: see ``chained_key``).
    Prefect's input hashing would walk the transcript and cannot hash live objects."""

    def compute_key(
        self, task_ctx: TaskRunContext, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str:
        return str(inputs["key"])


POSITIONAL_KEY = PositionalKey()
