"""Testing helpers for your own agent flows: deterministic models, a scripted model server
that real agent CLIs talk to instead of a provider, cassettes that record a real agent CLI's
launches once and replay them offline (or are written from a finished session's records,
``export_cassette``), and ``crash_at_every_step``: your agent program killed at each step
boundary in turn and resumed, with nothing run twice.

Every name loads on first use: the pytest plugin nexusflow ships imports this package in
every test session, and the server (``ScriptedModelServer``, ``ScriptedReply``,
``Recorded``) needs the ``testing`` extra, while the in-process scripted models (what
``nexusflow demo`` runs) work with the core install alone."""

import warnings
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..errors import CrashResumeError, CrashTestError
    from ..transports.cassette import Cassette
    from .agents import scripted_environment
    from .crash import CrashBoundary, CrashReport, crash_at_every_step
    from .export import export_cassette, export_cassette_sync
    from .scripted import ScriptedModel, follow_prompt
    from .server import Recorded, ScriptedModelServer, ScriptedReply

__all__ = [
    "Cassette",
    "CrashBoundary",
    "CrashReport",
    "CrashResumeError",
    "CrashTestError",
    "Recorded",
    "ScriptedModel",
    "ScriptedModelServer",
    "ScriptedReply",
    "crash_at_every_step",
    "export_cassette",
    "export_cassette_sync",
    "follow_prompt",
    "scripted_environment",
]

_WHERE = {
    "Cassette": "..transports.cassette",
    "CrashBoundary": ".crash",
    "CrashReport": ".crash",
    "CrashResumeError": "..errors",
    "CrashTestError": "..errors",
    "Recorded": ".server",
    "ScriptedModel": ".scripted",
    "ScriptedModelServer": ".server",
    "ScriptedReply": ".server",
    "export_cassette": ".export",
    "export_cassette_sync": ".export",
    "crash_at_every_step": ".crash",
    "follow_prompt": ".scripted",
    "scripted_environment": ".agents",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    if name == "Reply":  # this class's name in 0.1, easily taken for nexusflow.ModelReply
        warnings.warn("nexusflow.testing.Reply is deprecated; use ScriptedReply", DeprecationWarning, stacklevel=2)
        from .server import ScriptedReply

        return ScriptedReply
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
