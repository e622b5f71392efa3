"""The one-shot CLI transport: a style, an envelope, one process per turn."""

from .envelope import PREAMBLE, REQUEST_MARKER, Complaint, parse_reply, render, request_json
from .style import UNVERIFIED, AcpLaunch, CliStyle, CliStyles, builtin_style, load_cli_style
from .transport import CliConfig, CliTransport, resolve_style

__all__ = [
    "PREAMBLE",
    "REQUEST_MARKER",
    "UNVERIFIED",
    "AcpLaunch",
    "CliConfig",
    "CliStyle",
    "CliStyles",
    "CliTransport",
    "Complaint",
    "builtin_style",
    "load_cli_style",
    "parse_reply",
    "render",
    "request_json",
    "resolve_style",
]
