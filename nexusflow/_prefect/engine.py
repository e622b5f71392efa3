"""The flow engine's cancel intent, the one switch that makes it end a cancelled run
``Cancelled`` instead of ``Crashed``.

A cancellation the flow engine sees while the runner's control intent is ``cancel`` moves
the flow run through Cancelling to Cancelled (``flows/interrupt.py`` says why a signal is
answered that way). The intent lives in Prefect's private ``control_listener`` (checked on
3.9.1); a Prefect runner's cancel sets it over its control channel, and nexusflow sets it for
a signal of its own. Only this module names it (README.md, "cancel intent")."""

from __future__ import annotations

from prefect._internal import control_listener


def cancel_intended() -> bool:
    """Whether the run this process runs is being cancelled, by us or by a Prefect runner."""
    return control_listener.get_intent() == "cancel"


def intent_unset() -> bool:
    """Whether no one (no runner, no signal of ours) has set an intent yet."""
    return control_listener.get_intent() is None


def intend_cancel() -> None:
    """Set the intent to ``cancel``, as a runner's cancel does."""
    control_listener._set_intent("cancel")


def clear_intent() -> None:
    """Clear an intent this process set, once its interrupted run has settled."""
    control_listener.clear_intent()
