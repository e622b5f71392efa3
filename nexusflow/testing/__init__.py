"""Testing helpers for your own agent flows: deterministic models, and a scripted model
server that real agent CLIs talk to instead of a provider."""

from .agents import scripted_environment
from .scripted import ScriptedModel, follow_prompt
from .server import Recorded, Reply, ScriptedModelServer

__all__ = ["Recorded", "Reply", "ScriptedModel", "ScriptedModelServer", "follow_prompt", "scripted_environment"]
