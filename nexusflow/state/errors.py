"""A run's state's words: the message of ``nexusflow.Suspended``, which is the pending
run's state message."""

from __future__ import annotations


def suspended_message(prompt: str) -> str:
    """The message of ``nexusflow.Suspended``, which stays beside the ``Request`` it holds
    (a layer above this module); it is the pending run's state message."""
    return f"pending: {prompt}"
