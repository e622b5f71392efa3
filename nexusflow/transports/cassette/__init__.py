"""Cassettes: an agent CLI's launches recorded once and replayed offline (see ``cassette``)."""

from ..._support.secrets import secret_values
from .cassette import Cassette, active_cassette, exported
from .normalise import Scrub, default_places
from .schema import VERSION, AcpEvent, AcpSession, Answer, Asked, CassetteFile, Launch, ToolUse

__all__ = [
    "VERSION",
    "AcpEvent",
    "AcpSession",
    "Answer",
    "Asked",
    "Cassette",
    "CassetteFile",
    "Launch",
    "Scrub",
    "ToolUse",
    "active_cassette",
    "default_places",
    "exported",
    "secret_values",
]
