"""What ``initialize`` sends and how its answer is read: the protocol version and the
agent's capabilities."""

from __future__ import annotations

from typing import Any

from ..._support.version import package_version
from ..errors import acp_initialize_not_object, acp_protocol_version

PROTOCOL_VERSION = 1
CLIENT_CAPABILITIES: dict[str, Any] = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
"""Honest: nexusflow serves no file system and no terminal to the agent, so it claims none."""


def initialize_params() -> dict[str, Any]:
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "clientCapabilities": CLIENT_CAPABILITIES,
        "clientInfo": {"name": "nexusflow", "version": package_version()},
    }


def check_protocol_version(reply: Any) -> dict[str, Any]:
    """Only the JSON integer 1 is agreement; a string, a boolean, 1.5 or 2 is not."""
    if not isinstance(reply, dict):
        raise acp_initialize_not_object(reply)
    version = reply.get("protocolVersion")
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise acp_protocol_version(version, PROTOCOL_VERSION)
    return reply


def capability(capabilities: Any, *path: str) -> bool:
    """An absent capability is false, and so is anything but JSON true or an object (the
    spec declares some capabilities, such as ``sessionCapabilities.resume``, as objects)."""
    value = capabilities
    for key in path:
        if not isinstance(value, dict):
            return False
        value = value.get(key)
    return value is True or isinstance(value, dict)
