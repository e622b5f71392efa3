"""A short, stable digest of JSON-ready data: the names of stored records and step keys."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(value: Any) -> str:
    encoded = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest()[:16]
