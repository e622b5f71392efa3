"""Tool policies: what the operator (never the model) decides about a tool, by name or glob."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import TransientError


class ToolPolicy(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    approval: Literal["always", "never"] | Callable[[dict[str, Any]], bool] = Field(
        default="never", description="Ask before every call, never, or when the predicate on the arguments is true."
    )
    timeout: float | None = Field(default=None, gt=0, description="Seconds one attempt may take.")
    retries: int = Field(default=0, ge=0, description="Further attempts after a transient failure.")
    retry_delay: float = Field(default=1.0, ge=0)
    retry_on: tuple[type[BaseException], ...] = (TransientError,)
    concurrency: int | None = Field(
        default=None, ge=1, description="Calls in flight at once across all runs (a Prefect global concurrency limit)."
    )

    def needs_approval(self, arguments: str) -> bool:
        if self.approval == "always":
            return True
        if self.approval == "never":
            return False
        try:
            parsed = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return True
        return bool(self.approval(parsed if isinstance(parsed, dict) else {}))


NO_POLICY = ToolPolicy()


def policy_for(policies: Mapping[str, ToolPolicy], tool: str) -> ToolPolicy:
    """The policy named exactly for the tool, else the first glob that matches, else none."""
    if tool in policies:
        return policies[tool]
    for pattern, policy in policies.items():
        if fnmatch.fnmatchcase(tool, pattern):
            return policy
    return NO_POLICY


def concurrency_limit_name(tool: str) -> str:
    return f"nexusflow-tool-{tool}"
