"""A spent quota window, as an agent CLI words it: which answers mean "limit reached", and the
reset time they state. Shared by the one-shot readers and the ACP transport."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import NamedTuple


class Quota(NamedTuple):
    """The CLI said its subscription's window is spent."""

    resets_at: datetime | None = None
    """When it said the window resets; None when it did not say."""


EPOCH = re.compile(r"limit reached\|(\d{10})\b")
_IN = re.compile(r"(?:retry|try again|resets?) in (\d+(?:\.\d+)?) ?s(?:ec(?:ond)?s?)?\b", re.IGNORECASE)
_AT = re.compile(
    r"(?:try again at|resets?(?: at)?) (?:([A-Z][a-z]{2}) (\d{1,2})(?:st|nd|rd|th)?,? (\d{4}),? )?"
    r"(\d{1,2})(?::(\d\d))? ?([ap]m)\b",
    re.IGNORECASE,
)


def resets_at(said: str, now: datetime | None = None) -> datetime | None:
    """The reset time a CLI's message states, in UTC: an epoch (Claude Code's
    ``limit reached|1733338800``), a delay (``retry in 30s``), or a clock time on this
    machine's clock (``try again at 4:41 PM``, ``resets 3pm``: the next such time), with
    the date when the CLI gives one (codex's ``try again at Dec 5th, 2026 12:20 AM``)."""
    now = now or datetime.now(UTC)
    if found := EPOCH.search(said):
        return datetime.fromtimestamp(int(found.group(1)), UTC)
    if found := _IN.search(said):
        return now + timedelta(seconds=float(found.group(1)))
    if found := _AT.search(said):
        month, day, year, hour, minute, half = found.groups()
        hour_of_day = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
        local = now.astimezone()
        at = local.replace(hour=hour_of_day, minute=int(minute or 0), second=0, microsecond=0)
        if month is not None:
            try:
                on = datetime.strptime(f"{month} {day} {year}", "%b %d %Y")
            except ValueError:
                return None
            return at.replace(year=on.year, month=on.month, day=on.day).astimezone(UTC)
        return (at if at > local else at + timedelta(days=1)).astimezone(UTC)
    return None


_SPENT = re.compile(
    r"usage limit|hit your (?:usage )?limit|exhausted your .*quota|quota exceeded|resource.?exhausted"
    r"|\b429\b",
    re.IGNORECASE,
)


def spent_quota(said: str | None) -> Quota | None:
    """A spent window, from what the CLI said once it gave up (its own retries done): its
    limit message, or the provider's 429 as it reports it."""
    return Quota(resets_at(said)) if said and _SPENT.search(said) else None
