"""``nexusflow server``: a local Prefect server in the foreground, for the UI and for every
later run of this ``PREFECT_HOME``, from the command or from Python: it records itself in the
home while it runs (``nexusflow._prefect.server``), and they use it instead of starting their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import FrameType

from prefect.settings import get_current_settings

from .._prefect.server import ServerRecord, recorded_server, remove_server_record, write_server_record
from . import EXIT_FAILED
from .errors import server_not_running, usage_server_running

LEASES = "prefect.server.concurrency.lease_storage.filesystem"
"""Where the server keeps concurrency leases unless told otherwise: in its home, so a
restart keeps the subscription and tool limits' leases (in memory, the default, a restart
loses them and their slots stay taken)."""


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _watch() -> None:
    """Mark the runs whose process died ``Crashed`` while the server runs (``crash_dead_runs``),
    each in one line on the server's log; a look that fails is one line too, and the next
    goes on."""
    import anyio

    from ..errors import describe
    from ..ops.sessions import WATCH_EVERY, crash_dead_runs

    async def looks() -> None:
        while True:
            try:
                for session_id in await crash_dead_runs():
                    print(f"nexusflow: session {session_id}: its run died; marked Crashed", file=sys.stderr, flush=True)
            except Exception as exc:
                print(f"nexusflow: the watch for dead runs failed: {describe(exc)}", file=sys.stderr, flush=True)
            await anyio.sleep(WATCH_EVERY)

    anyio.run(looks)


def server(*, host: str | None = None, port: int | None = None, env: bool = False) -> int:
    """Start a local Prefect server in the foreground (Ctrl-C stops it) and print the
    PREFECT_API_URL it serves; later runs of this PREFECT_HOME use it without being told.
    Telemetry is off unless PREFECT_SERVER_ANALYTICS_ENABLED says.

    Parameters
    ----------
    host
        Address to listen on (default: Prefect's, 127.0.0.1).
    port
        Port to listen on (default: Prefect's, 4200).
    env
        Start nothing: print the ``export PREFECT_API_URL=...`` line of the server that runs
        for this PREFECT_HOME, for ``eval "$(nexusflow server --env)"`` (exit 1 when none runs).
    """
    settings = get_current_settings()
    home = Path(settings.home)
    running = recorded_server(home)
    if env:
        if running is None:
            raise server_not_running(home)
        print(f"export PREFECT_API_URL={running}", flush=True)
        return 0
    if running is not None:
        raise usage_server_running(home, running)
    host, port = host or settings.server.api.host, port or settings.server.api.port
    url = f"http://{host}:{port}/api"
    environment = {
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": LEASES,
        "PREFECT_UI_URL": f"http://{host}:{port}",  # the flow-run links alerts send (nexusflow alerts)
        **os.environ,
    }
    command = [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)]
    # Prefect's banner and logs are progress: stderr. Stdout carries only the line to export.
    process = subprocess.Popen(command, env=environment, stdout=sys.stderr)

    stopped: list[int] = []

    def stop(signum: int, _: FrameType | None) -> None:
        stopped.append(signum)
        process.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        while process.poll() is None and not _healthy(url):
            time.sleep(0.3)
        if process.poll() is None:
            write_server_record(ServerRecord(url=url, pid=process.pid, home=str(home)))
            print(f"export PREFECT_API_URL={url}", flush=True)
            os.environ["PREFECT_API_URL"] = url  # the watch's (the server has its environment)
            threading.Thread(target=_watch, name="nexusflow-watch", daemon=True).start()
        try:
            status = process.wait()
        except KeyboardInterrupt:  # the terminal's Ctrl-C reached the server too
            stopped.append(signal.SIGINT)
            status = process.wait()
    finally:
        remove_server_record(home, process.pid)
    return 0 if stopped or status == 0 else EXIT_FAILED
