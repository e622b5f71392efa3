"""Deprecated: ``agent_job`` is ``nexusflow.job:agent_job``. The README of 0.1 named this
entry point for deployments, so a ``prefect.yaml`` that still says
``nexusflow.flows.job:agent_job`` keeps working, with a warning. Loaded on first use, so
that ``flows`` never imports the client it sits below."""

from __future__ import annotations

import warnings
from importlib import import_module
from typing import Any


def __getattr__(name: str) -> Any:
    if name != "agent_job":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        "nexusflow.flows.job:agent_job is deprecated: use nexusflow.job:agent_job",
        DeprecationWarning,
        stacklevel=2,
    )
    return import_module("nexusflow.job").agent_job
