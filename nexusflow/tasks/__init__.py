"""Prefect tasks: a model turn and a tool call, each keyed by its position in the run."""

from .session import remembered
from .tool_call import ToolRecord, execute_tool, tool_call
from .turn import TurnRecord, model_turn, produce_turn
from .waiting import suspension, wait, wait_key

__all__ = [
    "ToolRecord",
    "TurnRecord",
    "execute_tool",
    "model_turn",
    "produce_turn",
    "remembered",
    "suspension",
    "tool_call",
    "wait",
    "wait_key",
]
