"""``nexusflow alerts``: install, list and remove the Prefect Automations that tell someone
when a job left alone needs a person. Imported only when one of them runs."""

from __future__ import annotations

import sys

from ..ops.alerts import Alert, install_alerts, list_alerts, remove_alerts, shown_duration


def _table(alerts: list[Alert]) -> None:
    print(f"{'alert':<10} {'enabled':<8} {'within':<8} {'notify':<32} automation")
    for alert in alerts:
        within = shown_duration(alert.within) if alert.within is not None else "-"
        enabled = "yes" if alert.enabled else "no"
        print(f"{alert.condition:<10} {enabled:<8} {within:<8} {alert.notify or '(block gone)':<32} {alert.name}")


async def install(*, notify: str, late: str = "15m", stalled: str = "30m") -> int:
    """Install (or update in place) the alerts, sending through a Prefect notification block.

    Parameters
    ----------
    notify
        The notification block, as <block type>/<name>: custom-webhook/night-alerts,
        slack-webhook/ops.
    late
        Tell of a scheduled run of a nexusflow deployment that has not started this long
        after Prefect marked it late (15m; at least 10s).
    stalled
        Tell of a run whose step has run this long with nothing new (30m; at least 10s).
    """
    installed = await install_alerts(notify, late=late, stalled=stalled)
    _table(installed)
    print(f"nexusflow: {len(installed)} alerts send through {notify}", file=sys.stderr)
    return 0


async def list_() -> int:
    """The installed alerts: what each tells, its bound and the block it sends through."""
    _table(await list_alerts())
    return 0


async def remove() -> int:
    """Remove nexusflow's alerts (only those: Automations tagged nexusflow-alerts)."""
    removed = await remove_alerts()
    print(f"nexusflow: removed {len(removed)} alerts", file=sys.stderr)
    return 0
