"""The MCP endpoints the tests talk to: the test MCP server (``mcp_server.py``) over stdio and
over streamable HTTP on 127.0.0.1, and the toolkit served to an ACP agent, with its ``add``
tool. Shared by the tests with no server (tests/offline/test_mcp.py, test_served.py) and the
runs that use them (tests/server/transports/test_mcp_runs.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from nexusflow import tool

from paths import HELPERS

SERVER = str(HELPERS / "mcp_server.py")


@contextmanager
def http_mcp_server() -> Iterator[tuple[str, str]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = os.urandom(8).hex()
    process = subprocess.Popen([sys.executable, SERVER, "http", str(port), token])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the MCP HTTP test server did not start") from None
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp", token
    process.terminate()
    process.wait(timeout=10)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def port(url: str) -> int:
    found = urlsplit(url).port
    assert found is not None
    return found
