"""A model that asks for many tool calls in one reply and keeps what it read back: shared by
the tests of the run's bounds (tests/server/run/test_bounds.py) and of their settings
(tests/offline/test_bounded_inputs.py)."""

from __future__ import annotations

from typing import Any

from nexusflow import ModelReply, ModelRequest


def tool_contents(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


class Calls:
    """A model that asks for ``calls`` (a list of (name, arguments string)) in its first
    reply, then answers with what it read; ``read`` keeps the tool results it saw."""

    def __init__(self, calls: list[tuple[str, str]]) -> None:
        self.calls = calls
        self.read: list[str] = []

    def __call__(self, request: ModelRequest) -> ModelReply | dict[str, Any]:
        if not any(m.role == "tool" for m in request.messages):
            return {
                "tool_calls": [
                    {"id": f"c{index}", "name": name, "arguments": arguments}
                    for index, (name, arguments) in enumerate(self.calls)
                ]
            }
        self.read = tool_contents(request)
        return ModelReply(content="done")
