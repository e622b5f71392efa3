"""The keys of a run's artifacts: written by the run's report, read by ``show``, deleted by
``forget`` and ``prune``."""

from __future__ import annotations

import re

ARTIFACTS = ("transcript", "summary", "progress")
"""The kinds of artifact a run keys by its session."""


def artifact_key(kind: str, session_id: str) -> str:
    """``<kind>-<session>`` in the only characters Prefect takes in a key."""
    return f"{kind}-" + (re.sub(r"[^a-z0-9-]+", "-", session_id.lower()).strip("-") or "run")
