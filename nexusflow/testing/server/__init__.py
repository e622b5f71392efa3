"""``ScriptedModelServer``: a model provider on 127.0.0.1 that plays scripted replies, one
module per provider API it speaks (``anthropic``, ``openai_chat``, ``openai_responses``,
``gemini``) around a shared core. Needs the ``testing`` extra (``pip install nexusflow[testing]``)."""

import warnings
from typing import Any

from .core import Recorded, ScriptedModelServer, default_is_side, tool_names
from .provider import Api
from .replies import ScriptedCall, ScriptedReply

__all__ = [
    "Api",
    "Recorded",
    "ScriptedCall",
    "ScriptedModelServer",
    "ScriptedReply",
    "default_is_side",
    "tool_names",
]


def __getattr__(name: str) -> Any:
    """``Reply``, this class's name in 0.1 (easily taken for ``nexusflow.ModelReply``), keeps working with a
    warning for one more release."""
    if name == "Reply":
        warnings.warn(
            "nexusflow.testing.server.Reply is deprecated; use ScriptedReply", DeprecationWarning, stacklevel=2
        )
        return ScriptedReply
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
