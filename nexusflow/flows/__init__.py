"""Flows: ``agent_run``, the agent loop as a Prefect flow."""

from .agent import agent_run, agent_run_storing_in

__all__ = ["agent_run", "agent_run_storing_in"]
