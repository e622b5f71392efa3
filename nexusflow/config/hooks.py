"""Hooks: operator code that sees (and may change) every model turn and tool call.

Each hook may be sync or async. A hook that raises fails the run: a broken policy must
not fail open.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import HookError
from ..messages import ModelReply, ModelRequest, ToolCall, ToolResult

BeforeLlm = Callable[[ModelRequest], ModelRequest | Awaitable[ModelRequest | None] | None]
"""May return a new request (other messages or tools) for this turn only."""

AfterLlm = Callable[[ModelRequest, ModelReply], ModelReply | Awaitable[ModelReply | None] | None]
"""Sees the request and the reply; may return a replacement reply."""

BeforeTool = Callable[[ToolCall], ToolCall | dict[str, Any] | ToolResult | str | Awaitable[Any] | None]
"""May return a rewritten call (or just new arguments as a dict), or a result (a
``ToolResult`` or a string) so that the tool does not run."""

AfterTool = Callable[[ToolCall, ToolResult], ToolResult | str | Awaitable[ToolResult | str | None] | None]
"""May return a replacement result, or a string: new content that keeps the error flag."""


async def call_hook(name: str, hook: Callable[..., Any], *args: Any) -> Any:
    try:
        value = hook(*args)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        raise HookError(name, exc) from exc
    return value
