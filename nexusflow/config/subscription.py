"""A CLI subscription's limits, shared by every run that names it, on every worker: data
here; the tasks hold them as Prefect global concurrency limits (``tasks/subscription.py``)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from .._support.digest import digest
from .errors import (
    limit_concurrency_invalid,
    limit_name_invalid,
    limit_rate_invalid,
    limit_without_bounds,
    limit_without_name,
)

_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")


def _positive(value: Any, integer: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return False
    return bool(value > 0)


class SubscriptionLimit(BaseModel):
    """At most ``max_concurrent`` model turns in flight and ``per_minute`` started per
    minute, across every process whose client names the same limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    max_concurrent: int | None = None
    per_minute: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, data: Any) -> Any:
        """Raised as our own one-line error, not as pydantic's report (which is several)."""
        if not isinstance(data, dict):
            return data
        name, most, rate = data.get("name"), data.get("max_concurrent"), data.get("per_minute")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise limit_name_invalid(name)
        if most is None and rate is None:
            raise limit_without_bounds(name)
        if most is not None and not _positive(most, integer=True):
            raise limit_concurrency_invalid(name, most)
        if rate is not None and not _positive(rate, integer=False):
            raise limit_rate_invalid(name, rate)
        return data

    @classmethod
    def of(
        cls, name: str | None, max_concurrent: int | None = None, per_minute: float | None = None
    ) -> SubscriptionLimit | None:
        """The limit the three client options describe, or None when none is given."""
        if name is None:
            if max_concurrent is not None or per_minute is not None:
                raise limit_without_name()
            return None
        return cls(name=name, max_concurrent=max_concurrent, per_minute=per_minute)

    @property
    def concurrency_name(self) -> str:
        return f"nexusflow-subscription-{self.name}"

    @property
    def rate_name(self) -> str:
        return f"nexusflow-subscription-{self.name}-rate"

    @property
    def quota_name(self) -> str:
        """The Prefect variable that says until when the subscription's quota is spent
        (variable names are lower case: a name with capitals gets a digest of itself)."""
        lower = self.name.lower()
        return f"nexusflow-quota-{lower}" + (f"-{digest(self.name)[:8]}" if lower != self.name else "")
