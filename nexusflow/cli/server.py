"""``nexusflow server``: a local Prefect server in the foreground, for the UI and for every
later command (they find it on its default address and stop starting one of their own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from types import FrameType

from prefect.settings import get_current_settings

from . import EXIT_FAILED


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def server(*, host: str | None = None, port: int | None = None) -> int:
    """Start a local Prefect server in the foreground (Ctrl-C stops it) and print the
    PREFECT_API_URL to export; telemetry is off unless PREFECT_SERVER_ANALYTICS_ENABLED says.

    Parameters
    ----------
    host
        Address to listen on (default: Prefect's, 127.0.0.1).
    port
        Port to listen on (default: Prefect's, 4200).
    """
    settings = get_current_settings().server.api
    host, port = host or settings.host, port or settings.port
    url = f"http://{host}:{port}/api"
    environment = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", **os.environ}
    command = [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)]
    # Prefect's banner and logs are progress: stderr. Stdout carries only the line to export.
    process = subprocess.Popen(command, env=environment, stdout=sys.stderr)

    stopped: list[int] = []

    def stop(signum: int, _: FrameType | None) -> None:
        stopped.append(signum)
        process.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    while process.poll() is None and not _healthy(url):
        time.sleep(0.3)
    if process.poll() is None:
        print(f"export PREFECT_API_URL={url}", flush=True)
    try:
        status = process.wait()
    except KeyboardInterrupt:  # the terminal's Ctrl-C reached the server too
        stopped.append(signal.SIGINT)
        status = process.wait()
    return 0 if stopped or status == 0 else EXIT_FAILED
