"""Prefect tasks: a model turn and a tool call, each keyed by its position in the run."""

from .._support.digest import digest
from .keys import chained_key
from .pending_call import suspension, wait
from .session import remembered
from .stored import check_stored, forget
from .tool_call import ToolRecord, ToolRuntime, execute_tool, tool_call
from .turn import TurnAsked, TurnRecord, TurnRuntime, model_turn, produce_turn

__all__ = [
    "ToolRecord",
    "ToolRuntime",
    "TurnAsked",
    "TurnRecord",
    "TurnRuntime",
    "chained_key",
    "check_stored",
    "digest",
    "execute_tool",
    "forget",
    "model_turn",
    "produce_turn",
    "remembered",
    "suspension",
    "tool_call",
    "wait",
]
