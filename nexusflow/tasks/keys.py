"""Positional cache keys: ``{session_id}/{step}/{kind}/{call}-{digest}``.

The position (session, step, call) is what makes a new flow run replay a crashed one; the
digest of the inputs makes a changed prompt re-execute instead of replaying a stale answer.
The flow run id is deliberately not part of the key.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(value: Any) -> str:
    encoded = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()[:16]


def step_key(session_id: str, step: int, kind: str, call: int, inputs: Any) -> str:
    return f"{session_id}/{step}/{kind}/{call}-{digest(inputs)}"
