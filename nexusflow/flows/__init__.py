"""Flows: ``agent_run``, the agent loop as a Prefect flow."""

from .agent_run import agent_run

__all__ = ["agent_run"]
