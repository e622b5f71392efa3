"""Cassettes: an agent CLI's launches recorded once and replayed offline (see ``cassette``)."""

from .cassette import Cassette, active_cassette
from .normalise import Scrub, secret_values
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
    "secret_values",
]
