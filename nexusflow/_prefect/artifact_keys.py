"""The keys of a run's artifacts: written by the run's report, read by ``show``, deleted by
``forget`` and ``prune``."""

from __future__ import annotations

import re

from .._support.digest import digest

ARTIFACTS = ("transcript", "summary", "progress")
"""The kinds of artifact a run keys by its session."""


def _folded(session_id: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", session_id.lower()).strip("-") or "run"


def artifact_key(kind: str, session_id: str) -> str:
    """``<kind>-<session>`` in the only characters Prefect takes in a key; an id that those
    characters cannot spell (``Mix_N``, ``a.b``) gets a digest of itself after it, so two
    sessions whose ids fold alike (``Mix_N`` and ``mix-n``) never share a key."""
    folded = _folded(session_id)
    return f"{kind}-{folded}" if folded == session_id else f"{kind}-{folded}-{digest(session_id)[:12]}"


def keys_of(session_id: str, kinds: tuple[str, ...] = ARTIFACTS) -> list[str]:
    """Every key a session's artifacts may have, the folded id alone of nexusflow 0.1
    included: what ``forget`` deletes, on the session's own flow runs only."""
    keys = {artifact_key(kind, session_id) for kind in kinds} | {f"{kind}-{_folded(session_id)}" for kind in kinds}
    return sorted(keys)
