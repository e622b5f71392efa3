"""Testing helpers for your own agent flows: deterministic models, and a scripted model
server that real agent CLIs talk to instead of a provider."""

from .scripted import ScriptedModel, follow_prompt

__all__ = ["ScriptedModel", "follow_prompt"]
