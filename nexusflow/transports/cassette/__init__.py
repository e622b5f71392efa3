"""Cassettes: an agent CLI's launches recorded once and replayed offline (see ``cassette``)."""

from .cassette import Cassette, active_cassette, exported
from .normalise import Scrub, default_places, secret_values
from .schema import VERSION, Answer, Asked, CassetteFile, Launch

__all__ = [
    "VERSION",
    "Answer",
    "Asked",
    "Cassette",
    "CassetteFile",
    "Launch",
    "Scrub",
    "active_cassette",
    "default_places",
    "exported",
    "secret_values",
]
