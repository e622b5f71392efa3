"""Which Prefect server a process uses: one rule, for the command and for Python programs.

1. The API that Prefect's settings name (``PREFECT_API_URL``, in the environment, a profile
   or a ``prefect.toml``), when they name one.
2. Else the server that ``nexusflow server`` started for this ``PREFECT_HOME``: it records
   itself in that home (``nexusflow-server.json``), and is used only while it runs and says
   it serves that very home, so another home's server is never used.
3. Else Prefect's embedded server: a temporary server of this process on the home's database.

The choice is made once per process, at the first client or run, and said once in the log.
A program's own ``@flow`` gets its server from Prefect when it starts, before any nexusflow
call inside it: ``choose_server()`` makes the choice first (a call inside a running flow can
only say which server that flow uses). Where the user chose nothing, the embedded server also
gets the settings that keep it quiet and patient offline: no telemetry (offline it logs an
ERROR at every start, and on a first run a ``database is locked`` traceback) and 90 s to start
(the 20 s default is too little on a busy two-core machine: a second server then starts on
the same port and fails with a traceback).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Literal, NamedTuple

import httpx
from pydantic import BaseModel

from .._support.secrets import get_logger

logger = get_logger("nexusflow.server")
if logger.level == logging.NOTSET:
    logger.setLevel(logging.INFO)  # the one line that says which server: shown, as Prefect's own INFO lines are

RECORD = "nexusflow-server.json"

QUIET: dict[str, tuple[str, str, str]] = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": ("server", "analytics_enabled", "false"),
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": ("server.ephemeral", "startup_timeout_seconds", "90"),
}
"""Environment variable -> (settings section, field, value) set where the user set nothing."""


class ServerRecord(BaseModel):
    """What ``nexusflow server`` writes in its home while it runs."""

    url: str
    pid: int
    home: str


class Choice(NamedTuple):
    url: str | None
    """The API used; None for the embedded server (its address is its own process's)."""
    source: Literal["setting", "home", "embedded"]

    def describe(self, home: Path) -> str:
        if self.source == "setting":
            return f"using the Prefect server at {self.url} (PREFECT_API_URL)"
        if self.source == "home":
            return f"using the Prefect server that `nexusflow server` runs for {home}: {self.url}"
        return f"using an embedded Prefect server (a temporary server of this process) on {home}"


def record_path(home: Path) -> Path:
    return home / RECORD


def write_server_record(record: ServerRecord) -> None:
    path = record_path(Path(record.home))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".part")
    temporary.write_text(record.model_dump_json())
    os.replace(temporary, path)


def remove_server_record(home: Path, pid: int) -> None:
    """Only the record this very server wrote: a later server of the home may have its own."""
    found = read_server_record(home)
    if found is not None and found.pid == pid:
        record_path(home).unlink(missing_ok=True)


def read_server_record(home: Path) -> ServerRecord | None:
    try:
        return ServerRecord.model_validate_json(record_path(home).read_bytes())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recorded_server(home: Path) -> str | None:
    """The API of the server recorded in ``home``, if its process lives and it answers that
    it serves this home (a stale record's port may since serve another home)."""
    record = read_server_record(home)
    if record is None or not _alive(record.pid):
        return None
    try:
        # A port nobody listens on refuses at once; a busy server may take seconds to answer,
        # and it is still this home's (2 s made a loaded machine's program run embedded).
        response = httpx.get(f"{record.url}/admin/settings", timeout=httpx.Timeout(15, connect=2))
        served = Path(str(response.json().get("home", ""))).expanduser()
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    if response.status_code != 200 or served.resolve() != home.expanduser().resolve():
        return None
    return record.url


def _embedded_running() -> bool:
    """Whether this process already started Prefect's embedded server (then it stays on it).
    Looked up without importing Prefect's server, which is heavy."""
    module = sys.modules.get("prefect.server.api.server")
    servers = getattr(getattr(module, "SubprocessASGIServer", None), "_instances", None)
    return bool(servers)


EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""Where Linux says which ports it hands to outgoing connections."""
LOWEST = 10_000
"""Below this, the ports people give their own servers (4200, 5432, 8000-9000...)."""


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default, and IANA's dynamic range starts higher still


def free_port_for_a_server() -> int:
    """A free port for a server started a moment later by another process: picked at random
    below the kernel's ephemeral range (on Linux, 10,000 to 32,767). A port the kernel
    chooses (bound to port 0) is from the range it also gives every outgoing connection: in
    the seconds before the server binds it, a connection of any process may take it (seen on
    a loaded machine: the server failed with ``address already in use``). Falls back to the
    kernel's choice where no such range is left."""
    top = _ephemeral_start()
    for _ in range(200):
        if top <= LOWEST:
            break
        port = random.randrange(LOWEST, top)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _own_port() -> None:
    """Give the embedded server a port of its own, from some 22,000 (``free_port_for_a_server``).
    Prefect picks one of 1,000 at random, then takes any server answering its health check
    there for its own, before its own has bound: two processes started together (two jobs,
    two tests) could share one server, another home's, which goes away with its process (seen
    as a 404 for a flow run just created)."""
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    if server.port is None and not server.running:
        server.port = free_port_for_a_server()
    if not server.running and "_run_uvicorn_command" not in vars(server):
        # Prefect-private (checked on 3.9.1): ``start`` spawns the server with this method,
        # again when its port was taken; an instance attribute replaces it for this process.
        server._run_uvicorn_command = lambda: _run_watched_uvicorn(server)  # type: ignore[method-assign]


def _run_watched_uvicorn(server: object) -> subprocess.Popen[bytes]:
    """Prefect's command for its embedded server (``SubprocessASGIServer._run_uvicorn_command``,
    3.9.1: the same arguments and environment), run under ``python -m nexusflow._prefect.server
    PARENT``, which ends the server when this process dies, however it dies (see ``watch``).

    In a session of its own: a terminal's Ctrl-C (SIGINT to the whole foreground process
    group) stops the command, which still needs its server to record how its run ended; a
    server stopped by the same keypress left the command retrying for minutes. It still ends
    with this process (``watch``), and Prefect stops it at a normal exit."""
    import prefect
    from prefect.settings import get_current_settings

    server_env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    return subprocess.Popen(
        args=[
            sys.executable,
            "-m",
            "nexusflow._prefect.server",
            str(os.getpid()),
            "--app-dir",
            str(prefect.__module_path__.parent),
            "--factory",
            "prefect.server.api.server:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(server.port),  # type: ignore[attr-defined]
            "--log-level",
            "error",
            "--lifespan",
            "on",
        ],
        env={**os.environ, **server_env, **get_current_settings().to_environment_variables(exclude_unset=True)},
        start_new_session=True,
    )


WATCH_EVERY = 0.25
"""How often the embedded server looks whether the process that started it still lives (s)."""
GRACE = 10.0
"""How long it may take to stop cleanly once that process died, before it exits at once (s)."""


def watch(parent: int) -> None:
    """End this process (an embedded server) once ``parent`` is no longer its parent: the
    kernel gives an orphan a new parent (1 or a subreaper) at once, whatever killed the old
    one, SIGKILL included, and no pid reuse can fake it. SIGTERM first, which uvicorn
    answers with a clean shutdown; exit after ``GRACE`` if that hangs.

    Polled from a thread of the server rather than ``PR_SET_PDEATHSIG``: that signal fires
    when the *thread* that forked the server ends, and Prefect starts its server from
    whichever thread makes the first request (a worker thread may end while the process lives)."""

    def run() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_EVERY)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(GRACE)
        os._exit(1)

    threading.Thread(target=run, name="nexusflow-parent-watch", daemon=True).start()


def _serve_watched(argv: list[str]) -> None:
    """``python -m nexusflow._prefect.server PARENT UVICORN-ARGS...``: uvicorn, watched."""
    import runpy

    watch(int(argv[0]))
    sys.argv = ["uvicorn", *argv[1:]]
    runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)


class _DrainingIsProgress(logging.Filter):
    """Prefect's log and event workers warn ``Still processing items: N items remaining...``
    when the process exits with items queued, and then send them: progress, not trouble.
    Shown at INFO; every other warning of theirs (a full queue dropping items) stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and record.getMessage().startswith("Still processing items"):
            record.levelno, record.levelname = logging.INFO, "INFO"
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        return True


UNREACHABLE_SAID_EVERY = 60.0
"""Seconds between two lines saying the server does not answer, while it stays down."""


def _debugging() -> bool:
    """``NEXUSFLOW_DEBUG`` (``nexusflow --debug``), read as the settings read a bool (this
    layer sits below them; a bad value is refused where a client is made)."""
    return os.environ.get("NEXUSFLOW_DEBUG", "").strip().lower() in ("1", "true", "yes", "on", "t", "y")


class _UnreachableIsWaiting(logging.Filter):
    """A server restart (or any spell when the API does not answer) while a run goes on is
    no failure of the run: Prefect's events client keeps each event it could not send and
    sends it again once it reconnects (checked on 3.9.1), and the run's own requests are
    retried. Prefect says otherwise, per event, every few seconds: a WARNING that event data
    "may be lost", then an ERROR from its service loop with the event's whole repr. Told
    here as one INFO line a minute, saying what happens; ``NEXUSFLOW_DEBUG`` keeps Prefect's."""

    def __init__(self) -> None:
        super().__init__()
        self._said_at: float | None = None
        self._unreachable_at: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or _debugging():
            return True
        text = str(record.msg)
        now = time.monotonic()
        if record.name == "prefect.events.clients" and text.startswith("Unable to connect to "):
            self._unreachable_at = now
            if self._said_at is not None and now - self._said_at < UNREACHABLE_SAID_EVERY:
                return False
            self._said_at = now
            reason = record.args[1] if isinstance(record.args, tuple) and len(record.args) > 1 else "?"
            record.msg, record.args = UNREACHABLE, (reason,)
            record.levelno, record.levelname = logging.INFO, "INFO"
            return True
        if (
            record.name == "prefect._internal.concurrency"
            and text.startswith("Service %r failed to process item")
            and isinstance(record.args, tuple)
            and record.args[:1] == ("EventsWorker",)
            and self._unreachable_at is not None
            and now - self._unreachable_at < UNREACHABLE_SAID_EVERY
        ):
            return False  # the event that connection failed for: kept, sent again (said above)
        return True


UNREACHABLE = "the Prefect server does not answer (%s); the run goes on, and its events are sent once it is back"
"""The one line that replaces Prefect's warnings while the server does not answer."""
LOGS_NOT_TAKEN = "the Prefect server did not take %d log lines of this process (%s): the UI will not show them"

_unreachable = _UnreachableIsWaiting()


def _say_logs_not_taken() -> None:
    """Prefect's log worker writes ``--- Error logging to API ---`` and the error to stderr,
    without a newline, when the server does not take a batch (its client's retries spent):
    the batch is dropped. Said as one INFO line instead; ``NEXUSFLOW_DEBUG`` keeps Prefect's
    (checked on 3.9.1: ``APILogWorker._handle_batch`` posts the batch and catches)."""
    from prefect.logging.handlers import APILogWorker

    original = APILogWorker.__dict__.get("_handle_batch")
    if original is None or getattr(original, "_nexusflow", False):
        return

    async def _handle_batch(self: APILogWorker, items: list[bytes]) -> None:
        if _debugging():
            await original(self, items)
            return
        try:
            await self._client.request(
                "POST", "/logs/", content=b"[" + b",".join(items) + b"]", headers={"Content-Type": "application/json"}
            )
        except Exception as exc:
            logger.info(LOGS_NOT_TAKEN, len(items), f"{type(exc).__name__}: {exc}")

    _handle_batch._nexusflow = True  # type: ignore[attr-defined]
    APILogWorker._handle_batch = _handle_batch  # type: ignore[method-assign]


def _quiet_workers() -> None:
    for name in ("EventsWorker", "APILogWorker"):
        worker = logging.getLogger(name)
        if not any(isinstance(f, _DrainingIsProgress) for f in worker.filters):
            worker.addFilter(_DrainingIsProgress())
    for name in ("prefect.events.clients", "prefect._internal.concurrency"):
        logging.getLogger(name).addFilter(_unreachable)  # adding it twice is a no-op
    _say_logs_not_taken()


_chosen: Choice | None = None
_said = False


def use_server(*, say: bool = False) -> Choice:
    """Apply the rule (once per process) and return the choice; with ``say`` (where a run
    starts, not where a command may still refuse its input in one line), log it, once.
    Outside any flow or task run only: a run inside a flow uses its flow's server."""
    global _chosen, _said
    if _chosen is not None:
        if say and not _said:
            _said = True
            logger.info("%s", _chosen.describe(_home()))
        return _chosen
    from .._support.launches import reap
    from .._support.tracing import configure

    reap()  # once per process, as it starts its first run: what killed runs left behind
    configure()  # an OTLP endpoint the environment names: set up before Prefect's first span
    from prefect.context import FlowRunContext, TaskRunContext, refresh_global_settings_context
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    changed: dict[str, str] = {}
    if FlowRunContext.get() is not None or TaskRunContext.get() is not None:
        # Too late to choose: the flow that runs us (a user's own) has its server already.
        url = str(settings.api.url) if settings.api.url else None
        choice = Choice(url, "setting" if url else "embedded")
    elif settings.api.url:
        choice = Choice(str(settings.api.url), "setting")
    elif not _embedded_running() and (url := recorded_server(settings.home)):
        choice = Choice(url, "home")
        changed["PREFECT_API_URL"] = url
    else:
        choice = Choice(None, "embedded")
        _own_port()
        for variable, (section, field, value) in QUIET.items():
            model = settings
            for part in section.split("."):
                model = getattr(model, part)
            if field not in model.model_fields_set and variable not in os.environ:
                changed[variable] = value
    if changed:
        os.environ.update(changed)  # inherited by the embedded server, which Prefect starts later
        refresh_global_settings_context()
    _quiet_workers()
    _chosen = choice
    return use_server(say=say)


def choose_server() -> str | None:
    """Pick this process's Prefect server now, by nexusflow's one rule (``PREFECT_API_URL``;
    else the home's running ``nexusflow server``; else an embedded server, started quiet),
    and say which, once. Call it before a flow of your own starts: Prefect starts its own
    embedded server at a flow's first run, and a nexusflow call made inside that flow can no
    longer choose (a nexusflow run outside any flow chooses by itself). Returns the API URL,
    or None for the embedded server, which the first run starts.

    ``eval "$(nexusflow server --env)"`` in a shell makes the same choice for every
    program it starts, Prefect's own commands included."""
    return use_server(say=True).url


def _home() -> Path:
    from prefect.settings import get_current_settings

    return Path(get_current_settings().home)


if __name__ == "__main__":
    _serve_watched(sys.argv[1:])
