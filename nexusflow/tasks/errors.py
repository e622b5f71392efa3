"""The run's tasks' words: a model turn with nothing in it, a hook that returned what it
cannot, a ``wait_for`` that answered no ``Answer``, a tool result past its limits, a step
whose record was rolled back."""

from __future__ import annotations

from .._prefect.errors import storage_step_failed
from .._support.wording import shown_size
from ..errors import HookError, ModelError, StorageError


def model_empty_reply() -> ModelError:
    return ModelError("model: empty reply (no content and no tool calls)")


def hook_returned(hook: str, value: object) -> HookError:
    return HookError(hook, TypeError(f"returned an unsupported {type(value).__name__}"))


def wait_for_returned(value: object) -> TypeError:
    return TypeError(f"wait_for returned {type(value).__name__}, not an Answer")


def tool_error_too_large(name: str, size: int, limit: int) -> str:
    """A result past ``max_tool_result``, worded as the CLI's output limit (``cli_output_limit``)."""
    return f'error: tool "{name}" returned {size} bytes, over the {shown_size(limit)} result limit'


def tool_error_too_deep(name: str, depth: int) -> str:
    return f'error: invalid arguments for tool "{name}": they nest deeper than {depth} levels (max_argument_depth)'


def storage_step_rolled_back(step: str, key: str) -> StorageError:
    return storage_step_failed(step, key, "its transaction was rolled back (the log says why)")
