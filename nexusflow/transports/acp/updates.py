"""``session/update`` notifications: every update kept, text and thoughts streamed into the
turn, tool call announcements remembered for permission requests, unknown kinds tolerated."""

from __future__ import annotations

import logging
from typing import Any

from ...state.events import TextChunk, ThoughtChunk
from .connection import as_object
from .turn import Turn, text_of

logger = logging.getLogger("nexusflow.acp")

KNOWN_UPDATES = {
    "agent_message_chunk",
    "agent_thought_chunk",
    "user_message_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "available_commands_update",
    "current_mode_update",
    "config_option_update",
    "session_info_update",
    "usage_update",
}


class Updates:
    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.unknown_updates: list[str] = []
        self.announced: dict[str, dict[str, Any]] = {}
        """What the agent said about each tool call, by ``toolCallId``."""

    def receive(self, method: str, params: dict[str, Any], turn: Turn | None) -> None:
        """``turn`` is the turn the update belongs to; None outside one or while a loaded session replays."""
        if method != "session/update":
            logger.debug("acp: ignoring notification %s", method)
            return
        update = as_object(params.get("update"))
        kind = update.get("sessionUpdate")
        self.updates.append(update)
        emit = turn.scope.emit if turn is not None else None
        if kind == "agent_message_chunk":
            text = text_of(update.get("content"))
            if turn is not None and text:
                turn.text.append(text)
                if emit:
                    emit(TextChunk(step=turn.scope.step, text=text))
        elif kind == "agent_thought_chunk":
            text = text_of(update.get("content"))
            if turn is not None and text and emit:
                emit(ThoughtChunk(step=turn.scope.step, text=text))
        elif kind in ("tool_call", "tool_call_update"):
            call_id = update.get("toolCallId")
            if isinstance(call_id, str):
                self.announced[call_id] = {**self.announced.get(call_id, {}), **update}
        elif kind == "usage_update" and turn is not None:
            _count_cost(turn, update)
        elif kind not in KNOWN_UPDATES:
            self.unknown_updates.append(str(kind))
            logger.info("acp: ignoring an update of unknown kind %r", kind)


def _count_cost(turn: Turn, update: dict[str, Any]) -> None:
    """A ``usage_update`` states the session's cumulative cost; claude's adapter names the
    model in ``_meta`` (``_claude/model``), read only as a name."""
    cost = as_object(update.get("cost"))
    amount = cost.get("amount")
    if cost.get("currency") == "USD" and isinstance(amount, int | float) and not isinstance(amount, bool):
        turn.costs.append(float(amount))
    for key, value in as_object(update.get("_meta")).items():
        if key.endswith("/model") and isinstance(value, str) and value:
            turn.model = value
