"""Flows: ``agent_run``, the agent loop as a Prefect flow."""

from .agent import agent_run

__all__ = ["agent_run"]
