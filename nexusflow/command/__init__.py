"""The ``nexusflow`` command: the answer on stdout, progress on stderr; exit status 0 when the
run completed, 1 when it failed, 2 for a usage error, 3 while it waits for an answer. A
failure is one line; ``--debug`` (anywhere, any command) prints its traceback too.

This module only declares the commands: each one's module (and with it Prefect) is imported
when that command runs, so ``nexusflow --help`` answers at once."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from collections.abc import Sequence

from cyclopts import App, CycloptsError, Parameter

from .._support.version import package_version
from ..errors import ArgumentError, NexusflowError, PrefectApiError, UsageError, unwrap
from .errors import usage_no_alerts_command, usage_no_command, usage_no_styles_command

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + 15
"""SIGTERM ended the run (Cancelled, resumable), as a shell reports a process SIGTERM ended."""
EXIT_PENDING = 3
EXIT_PIPE_CLOSED = 128 + 13
"""What a shell reports for a program that SIGPIPE stopped: the reader (``| head``) left."""


app = App(
    name="nexusflow",
    help=__doc__.split("\n\n")[0] if __doc__ else None,
    version=package_version,
    # No --no-X / --empty-X twins: every flag means what it names.
    default_parameter=Parameter(negative=()),
    suppress_keyboard_interrupt=False,  # main() says how Ctrl-C ends, not cyclopts
)
# One module per command, named after it. The help given here is what ``nexusflow --help``
# lists without importing the command; ``nexusflow COMMAND --help`` describes its flags from
# the command's docstring.
app.command("nexusflow.command.run:run", help="Run an agent on a prompt, or answer a pending run.")
app.command("nexusflow.command.demo:demo", help="A multi-step tool-calling run on the scripted model.")
app.command("nexusflow.command.answer:answer", help="Answer a run that waits, by its session id or its flow run id.")
app.command("nexusflow.command.show:show", help="A past run's transcript and steps, by session id or flow run id.")
app.command("nexusflow.command.sessions:sessions", help="The sessions in the result storage and where each stands.")
app.command("nexusflow.command.forget:forget", help="Delete sessions' records, conversation and left-over lock.")
app.command("nexusflow.command.prune:prune", help="Forget the sessions idle for longer than a duration.")
app.command(
    "nexusflow.command.export:export", help="Write a cassette from a finished session's steps, to replay it in a test."
)
app.command(
    "nexusflow.command.server:server", help="Start a local Prefect server and print the PREFECT_API_URL to export."
)
# Kept with the server it starts (nexusflow/mcp_server), which sits above the other commands.
app.command(
    "nexusflow.mcp_server.command:mcp", help="Serve runs to agents and editors over MCP: start, watch, answer, cancel."
)
styles = App(name="styles", help="The built-in CLI styles.")
_STYLES = "nexusflow.command.styles"
styles.command(f"{_STYLES}:styles_list", name="list", help="Each style, its transports and verified versions.")
styles.command(
    f"{_STYLES}:styles_verify",
    name="verify",
    help="Check your installed CLI against its style, on a scripted model server (no tokens spent).",
)
app.command(styles)
alerts = App(name="alerts", help="Prefect Automations that notify when a run needs a person.")
_ALERTS = "nexusflow.command.alerts"
alerts.command(f"{_ALERTS}:install", help="Install or update the alerts, sending through a notification block.")
alerts.command(f"{_ALERTS}:list_", name="list", help="The installed alerts and the block each sends through.")
alerts.command(f"{_ALERTS}:remove", help="Remove nexusflow's alerts (and no other Automation).")
app.command(alerts)


@app.default
def _no_command() -> None:
    raise usage_no_command()


@styles.default
def _no_styles_command() -> None:
    raise usage_no_styles_command()


@alerts.default
def _no_alerts_command() -> None:
    raise usage_no_alerts_command()


@app.command(name="mcp-bridge")
async def mcp_bridge(url: str, /) -> None:
    """Relay MCP over stdio to a served toolkit over HTTP (started by ACP agents).

    Declared here, not with the other commands: agents start it once per session, and it
    needs no Prefect.

    Parameters
    ----------
    url
        The served toolkit's MCP endpoint (the bearer token comes in the environment).
    """
    from ..transports.acp.bridge import bridge

    await bridge(url)


def _one_line(error: CycloptsError) -> str:
    """Cyclopts renders a parse error as a panel; the command prints it as one line."""
    return " ".join(str(error).split())


def _leave_busy_threads(status: int = EXIT_INTERRUPTED) -> None:
    """After Ctrl-C, exit without waiting for a sync tool still running in a worker thread.

    Python cannot stop such a thread, and the interpreter would wait for it at exit for as long
    as the tool takes. The exit hooks still run (Prefect sends its last logs and events); the
    session goes on from its last finished step, where the tool runs again."""
    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not busy:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(status)


DEBUG = "--debug"
"""Anywhere before a ``--``, for any command: tracebacks as well as the one line (the
``NEXUSFLOW_DEBUG`` setting, for this command and what it starts)."""


def _debug_flag(argv: Sequence[str] | None) -> list[str]:
    """``argv`` without ``--debug``, which sets ``NEXUSFLOW_DEBUG=1`` when given."""
    args = list(sys.argv[1:] if argv is None else argv)
    options = args[: args.index("--")] if "--" in args else args
    if DEBUG in options:
        args.remove(DEBUG)
        os.environ["NEXUSFLOW_DEBUG"] = "1"
    return args


def _told(line: str) -> None:
    """The one line of a failure, after its traceback when debugging (``NEXUSFLOW_DEBUG``)."""
    from ..config.settings import settings

    try:
        debugging = settings().debug
    except ArgumentError:  # a bad NEXUSFLOW_* setting: the failure is said all the same
        debugging = False
    if debugging:
        traceback.print_exc()
    print(line, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    before = os.environ.get("NEXUSFLOW_DEBUG")
    try:
        return _main(_debug_flag(argv))
    finally:  # a caller in this process (a test) keeps its own environment
        if before is None:
            os.environ.pop("NEXUSFLOW_DEBUG", None)
        else:
            os.environ["NEXUSFLOW_DEBUG"] = before


def _main(argv: list[str]) -> int:
    try:
        status = app(argv, print_error=False, exit_on_error=False, result_action="return_value")
        sys.stdout.flush()  # here, where a reader that left is seen, not at the interpreter's exit
    except BrokenPipeError:
        # Whatever is still buffered goes nowhere, quietly: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE_CLOSED
    except CycloptsError as exc:
        print(f"nexusflow: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _leave_busy_threads()
        return EXIT_INTERRUPTED  # what a shell reports for SIGINT; the run said how to go on
    except SystemExit as exc:
        if exc.code != EXIT_TERMINATED:
            raise
        _leave_busy_threads(EXIT_TERMINATED)  # SIGTERM cancelled the run; it said how to go on
        return EXIT_TERMINATED
    except (UsageError, ArgumentError) as exc:  # a bad flag, or a bad NEXUSFLOW_* setting
        print(f"nexusflow: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NexusflowError as exc:
        _told(f"nexusflow: error: {exc}")
        return EXIT_FAILED
    except Exception as exc:
        from .._prefect.retry import is_transient

        if not is_transient(exc):
            raise
        # The API down or busy past every retry: one line, and the command can be run again
        # (a forget or a prune that stopped midway finishes then).
        _told(f"nexusflow: error: {PrefectApiError(unwrap(exc))}")
        return EXIT_FAILED
    return status if isinstance(status, int) else 0
