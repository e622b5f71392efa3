"""``nexusflow styles list`` and ``styles verify``."""

from __future__ import annotations

from .._prefect.server import use_server
from ..transports.oneshot import CliStyles, builtin_style
from . import EXIT_FAILED
from ._shared import Style, check_timeout
from .errors import usage_no_verify_recipe


def styles_list() -> int:
    """Each style, its transports and verified versions."""
    print(f"{'style':<10} {'transports':<20} verified")
    for member in CliStyles:
        if member is CliStyles.CUSTOM:
            continue
        style = builtin_style(member)
        acp = style.acp
        transports = "cli" + (", acp (adapter)" if acp and acp.adapter else ", acp" if acp else "")
        verified = f"cli {style.verified}" + (f"; acp {acp.verified}" if acp else "")
        print(f"{member.value:<10} {transports:<20} {verified}")
    return 0


async def styles_verify(
    *,
    style: Style,
    command: str,
    acp_command: str | None = None,
    model: str | None = None,
    timeout: float = 180.0,
) -> int:
    """Check your installed CLI against its style, on a scripted model server (no tokens spent).

    Your logins and settings stay untouched; the exit status is 1 when any check fails.

    Parameters
    ----------
    style
        The style to check.
    command
        Your CLI's path or name.
    acp_command
        Its ACP adapter (claude, codex), to check ACP too.
    model
        Model flag to pass (default: the scripted server's model).
    timeout
        Seconds per launch.
    """
    from ..testing.conformance import verify_style, version_of

    if style in (CliStyles.CUSTOM, CliStyles.DEVIN):
        raise usage_no_verify_recipe(style.value)
    check_timeout(timeout)
    chosen = builtin_style(style)
    print(
        f"{style.value}: {command} — {version_of(command)}"
        f" (style verified with {chosen.verified}{f'; acp {chosen.acp.verified}' if chosen.acp else ''})"
    )
    use_server()
    checks = await verify_style(style, command, acp_command=acp_command, model=model, timeout=timeout)
    for check in checks:
        print(check.line())
    return 0 if all(check.ok for check in checks) else EXIT_FAILED
