"""Testing helpers for your own agent flows: deterministic models, and a scripted model
server that real agent CLIs talk to instead of a provider.

The server (``ScriptedModelServer``, ``ScriptedReply``, ``Recorded``) needs the ``testing``
extra and is imported on first use, so that the in-process scripted models (what
``nexusflow demo`` runs) work with the core install alone."""

import warnings
from typing import TYPE_CHECKING, Any

from .agents import scripted_environment
from .scripted import ScriptedModel, follow_prompt

if TYPE_CHECKING:
    from .server import Recorded, ScriptedModelServer, ScriptedReply

__all__ = [
    "Recorded",
    "ScriptedModel",
    "ScriptedModelServer",
    "ScriptedReply",
    "follow_prompt",
    "scripted_environment",
]

_SERVER_NAMES = frozenset({"Recorded", "ScriptedModelServer", "ScriptedReply"})


def __getattr__(name: str) -> Any:
    if name in _SERVER_NAMES:
        from . import server

        return getattr(server, name)
    if name == "Reply":  # this class's name in 0.1, easily taken for nexusflow.ModelReply
        warnings.warn("nexusflow.testing.Reply is deprecated; use ScriptedReply", DeprecationWarning, stacklevel=2)
        from .server import ScriptedReply

        return ScriptedReply
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
