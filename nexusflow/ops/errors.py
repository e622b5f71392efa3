"""The operator's words: ``sessions``' refused durations and states, and ``install_alerts``'
refused blocks and bounds."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from ..errors import AlertsError, ArgumentError


def sessions_bad_duration(text: str) -> ArgumentError:
    return ArgumentError(
        f"sessions: {text!r} is not a duration: give a number and a unit, s, m, h, d or w (7d, 12h, 0s)", "older_than"
    )


def sessions_duration_too_long(text: str, longest: str) -> ArgumentError:
    """Past ``longest`` the cutoff would fall before the year 1 (``OverflowError``)."""
    return ArgumentError(f"sessions: {text!r} is too long a duration: at most {longest}", "older_than")


def sessions_bad_state(name: str, known: Iterable[str]) -> ArgumentError:
    return ArgumentError(f"sessions: {name!r} is not a state (the states: {', '.join(known)})", "state")


def alerts_bad_block(slug: object) -> ArgumentError:
    return ArgumentError(
        f"alerts: --notify takes a block's <type>/<name>, like custom-webhook/night-alerts, not {slug!r}", "notify"
    )


def alerts_no_block(slug: str) -> AlertsError:
    return AlertsError(f'alerts: no block "{slug}" on the Prefect server: save the notification block first')


def alerts_not_notifying(slug: str) -> AlertsError:
    return AlertsError(
        f'alerts: block "{slug}" cannot send notifications: give a notification block '
        "(custom-webhook, slack-webhook, ms-teams-webhook, ...)"
    )


def alerts_bad_bound(name: str, value: object, shortest: timedelta, longest: timedelta) -> ArgumentError:
    return ArgumentError(
        f"alerts: --{name} must be a duration from {int(shortest.total_seconds())}s to {longest.days}d"
        f" (30s, 15m, 2h), not {value!r}",
        name,
    )
