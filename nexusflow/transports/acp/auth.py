"""A request the agent refused because it is not logged in: ACP's auth-required error
(code -32000 in the protocol's error codes: with an empty HOME, claude-agent-acp 0.101 answers
session/prompt and codex-acp 2.6 session/new with -32000 "Authentication required"), or
words the style's ``auth_patterns`` recognise in the error's message, its ``data.message`` or its
``data`` when that is a string (goose acp 1.52: -32603 "Internal error", data "Failed to resolve
provider: Configuration value not found: GOOSE_PROVIDER")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import AuthRequired, RemoteError

if TYPE_CHECKING:
    from ..oneshot.style import CliStyle

AUTH_REQUIRED = -32000
"""ACP's error code for "authentication required" (the spec's ``auth_required``)."""


def not_logged_in(style: CliStyle, failure: BaseException) -> AuthRequired | None:
    if not isinstance(failure, RemoteError):
        return None
    data = failure.data if isinstance(failure.data, dict) else {"message": failure.data}  # goose: a string
    said = " ".join(part for part in (str(failure), data.get("message")) if isinstance(part, str))
    if failure.code == AUTH_REQUIRED:
        return AuthRequired(style.name, said, style.login)
    return style.not_logged_in(said)
