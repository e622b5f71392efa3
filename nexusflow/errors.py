"""Every error nexusflow raises, as one hierarchy; the words of each live beside its code.

The classes a program catches are here, on the floor every wing reads:

    * NexusflowError
      - MapMemberLost
      - ArgumentError                (also TypeError, ValueError)
      - ToolkitError
        - McpServerError
        - MissingVariableError
      - McpCallError
      - ModelError
        - TransientError
        - CliError
          - CliTransientError        (also TransientError)
        - AcpError
          - AcpTransientError        (also TransientError)
          - RemoteError
      - HookError
      - MaxTurnsExceeded
      - BudgetExceeded
      - QuotaExhausted
      - AuthRequired
      - OutputError
      - SessionIdError               (also ValueError)
      - ResumeError
      - NoRuntimeError
      - StorageError
      - SessionBusyError
      - SessionLockError
      - SessionLiveError
      - SessionTakenOverError
      - PrefectApiError
      - SubscriptionLimitError
      - UsageError
      - StyleCheckFailed
      - CassetteError
        - CassetteMismatch           (also ModelError)
        - CassetteExportError
      - CrashTestError
        - CrashResumeError
      - AlertsError

``nexusflow.Suspended`` (a ``NexusflowError``) is defined beside the request it holds, in
``nexusflow.state.suspension``.

Messages are pinned, so docs, tests and users can rely on them, and each is written in one
place: the errors module of the lowest wing that raises it (``nexusflow/transports/errors.py``
for a CLI's failure, ``nexusflow/config/errors.py`` for a refused argument), as a function
that takes only values and the names of what it checks, and returns the exception. A change
to a transport's wording is a change to the transports. What stays here: the classes, the
messages of the top floor (the client, ``map``, ``agent_job``, the conversation's types),
``describe`` and ``unwrap`` (which read any error, on every floor), and the command's usage
lines until the command has its own errors module. ``tests/offline/test_errors.py`` checks that no
other module words a message, and that each message sits in the wing that uses it.

Tool-level failures are not exceptions: they become error results the model reads
(``nexusflow.toolkit.errors``' ``tool_error_*``), because a bad tool call must never crash a run.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ._support.secrets import redact

if TYPE_CHECKING:
    pass


class NexusflowError(Exception):
    """Base of every nexusflow error."""

    expected = True
    """An outcome a run can meet (a login missing, a quota spent, a timeout, a busy session),
    said in one line without a traceback (``nexusflow.flows.quiet``); False where the error
    stands for a user's code that raised (a hook, a ``generate``), whose traceback is the news."""


def run_outside_a_flow() -> NexusflowError:
    return NexusflowError("run(subflow=False) runs the loop in the current flow run: call it inside a flow")


def map_concurrency_too_low(max_concurrency: int) -> NexusflowError:
    return NexusflowError(f"map: max_concurrency must be at least 1, got {max_concurrency}")


def map_member_stays_here(what: str, runner: str, exc: BaseException) -> NexusflowError:
    return NexusflowError(
        f"map: the {what} cannot go to another process, where the flow's {runner} runs each member "
        f"({type(exc).__name__}: {exc}); make it picklable (no lock, open file or connection in it) "
        "or run the flow with ThreadPoolTaskRunner"
    )


class MapMemberLost(NexusflowError):
    """A member of a fan-out whose process stopped while it held its session (its Dask
    worker killed or frozen), or that never started on the process it was sent to, and that
    its task runner neither reported nor ran again: the batch stops waiting for it, within a
    bound, instead of for ever."""

    def __init__(self, session_id: str, seconds: float, why: str | None = None) -> None:
        self.session_id = session_id
        why = why or (
            f"stopped beating {seconds:.0f}s ago while it held its session, and its task runner reported nothing:"
            " the process that ran it died or froze (a Dask worker killed or stopped)"
        )
        super().__init__(f'map: member "{session_id}" {why}; run the batch again to resume it from its stored steps')


def agent_job_needs_a_style() -> NexusflowError:
    return NexusflowError("agent_job: command and model need a style")


def agent_job_failed(error: str | None) -> NexusflowError:
    """The job's flow run fails with the run's own error; expected whatever it was: the run
    logged a bug's traceback already, and this one would only point at the job's ``raise``."""
    return NexusflowError(error or "the agent run failed")


def agent_job_not_waiting(session_id: str) -> NexusflowError:
    return NexusflowError(f'agent_job: session "{session_id}" is not waiting for an answer')


class ArgumentError(NexusflowError, TypeError, ValueError):
    """A public call was given what it cannot use: refused where it is given, in one line
    naming the call and the argument, never deep inside a run."""

    def __init__(self, message: str, argument: str) -> None:
        self.argument = argument
        super().__init__(message)


class ToolkitError(NexusflowError):
    """A toolkit could not be built: a bad tool, ``mcp.json`` or skills folder."""


class McpServerError(ToolkitError):
    def __init__(self, server: str, reason: str) -> None:
        self.server = server
        super().__init__(f'mcp: server "{server}" failed to start: {reason}')


class MissingVariableError(ToolkitError):
    def __init__(self, variable: str) -> None:
        self.variable = variable
        super().__init__(f"environment variable ${{{variable}}} is not set")


class McpCallError(NexusflowError):
    """An MCP tool call failed in transport (not a tool error the server reported)."""


class ModelError(NexusflowError):
    """A model turn could not be produced or its reply could not be read."""


class TransientError(ModelError):
    """A failure after which nothing happened and trying again is worth it: a model's rate
    limit or overload (retried by ``model_retries``), a tool's refused connection (retried
    by a ``ToolPolicy``'s ``retries``). Raise it yourself, or let nexusflow classify: an
    HTTP 429 or 5xx from the client inside ``generate``, a CLI or ACP error matching
    ``retry_on``."""

    launches = 0
    """What the failed attempt launched (a one-shot CLI's launches): a retry is paid for. On
    the error a turn raises after its last attempt, what every attempt launched."""
    model_retries = 0
    """On the error a turn raises after its last attempt, the attempts retried before it: the
    turn writes no record, so the failed run counts its cost from here."""


class HookError(NexusflowError):
    expected = False

    def __init__(self, hook: str, exc: BaseException) -> None:
        super().__init__(f"hook {hook} raised {type(exc).__name__}: {exc}")


class MaxTurnsExceeded(NexusflowError):
    def __init__(self, max_turns: int) -> None:
        self.max_turns = max_turns
        super().__init__(f"max turns exceeded: no final answer after {max_turns} turns")


class BudgetExceeded(NexusflowError):
    """The run tree spent its budget: the run stops before its next live turn."""

    def __init__(self, session_id: str, spent: str) -> None:
        self.session_id = session_id
        super().__init__(f"budget: session {session_id} spent {spent}")


class QuotaExhausted(NexusflowError):
    """A subscription's window is spent: the CLI said so, in its own words or as the
    provider's 429 it gave up on. Never transient: asking again before ``resets_at`` (when
    the CLI said it) only meets the same answer."""

    def __init__(self, style: str, resets_at: datetime | None = None, said: str = "") -> None:
        self.style = style
        self.resets_at = resets_at
        self.said = said
        when = f"resets {resets_at.isoformat(timespec='seconds')}" if resets_at is not None else "reset time unknown"
        text = redact(said).strip()[-300:]
        super().__init__(f"quota: {style} limit reached ({when})" + (f": {text}" if text else ""))

    def reset_after(self, wait: float) -> datetime:
        """When to ask again: the reset the CLI stated, else ``wait`` seconds from now."""
        return self.resets_at or datetime.now(UTC) + timedelta(seconds=wait)

    def __reduce__(self) -> tuple[Any, ...]:
        return (QuotaExhausted, (self.style, self.resets_at, self.said))


class AuthRequired(NexusflowError):
    """The CLI is not logged in, its login expired, or its credentials or API key were
    refused: it said so in words its style recognises (``auth_patterns``), or its ACP adapter
    answered with the protocol's auth-required error. Never retried and never sent to a
    fallback client: asking again, or another client, cannot log this user in."""

    def __init__(self, style: str, said: str = "", login: str = "") -> None:
        self.style = style
        self.said = said
        self.login = login
        text = redact(said).strip()  # before the cap, which could cut a secret in two
        if len(text) > 1000:
            text = text[-1000:]
        self.shown = text
        """What the CLI said, redacted and capped as the message quotes it."""
        command = login or f"{style}'s login command"
        super().__init__(f"auth: {style} is not logged in: {text}; run {command} as the user the job runs as")

    def __reduce__(self) -> tuple[Any, ...]:
        return (AuthRequired, (self.style, self.said, self.login))


class OutputError(NexusflowError):
    """The run's output type cannot be used, or the final answer did not match it."""


class SessionIdError(NexusflowError, ValueError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"invalid session id {session_id!r}: use 1-128 letters, digits, '.', '_' or '-'")


class ResumeError(NexusflowError):
    """``client.resume`` was asked to continue something it cannot."""


def resume_unknown_session(session_id: str, where: str) -> ResumeError:
    return ResumeError(f'resume: no session "{session_id}" is known in {where}')


def resume_not_waiting(session_id: str) -> ResumeError:
    return ResumeError(f'resume: session "{session_id}" is not waiting for an answer')


def resume_other_answer(answer_id: str, session_id: str, waiting_for: str) -> ResumeError:
    return ResumeError(f'resume: the answer is for "{answer_id}", but session "{session_id}" waits for "{waiting_for}"')


class NoRuntimeError(NexusflowError):
    def __init__(self) -> None:
        super().__init__("agent_run needs a client and a toolkit: start it with `await client.run(prompt, toolkit)`")


def arguments_not_an_object(value: object) -> ValueError:
    """``ToolCall.parsed_arguments`` on arguments that decode to something else."""
    return ValueError(f"arguments must be a JSON object, got {type(value).__name__}")


def unwrap(exc: BaseException) -> BaseException:
    """The one error inside task-group wrappers, so users read the cause, not the group."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """Our errors read as their pinned message; anything else names its type. Redacted:
    this text becomes ``RunResult.error`` and the run's state message."""
    exc = unwrap(exc)
    if isinstance(exc, NexusflowError):
        return redact(str(exc))
    return redact(f"{type(exc).__name__}: {exc}") if str(exc) else type(exc).__name__


class CliError(ModelError):
    """The one-shot CLI transport failed; messages are pinned in the design. A message may
    quote what the CLI printed, so it is redacted as it is built: Prefect records it too."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class CliTransientError(CliError, TransientError):
    """A CLI failure whose text matches the client's ``retry_on``."""

    def __init__(self, message: str, launches: int) -> None:
        super().__init__(message)
        self.launches = launches


class AcpError(ModelError):
    """The ACP transport failed: handshake, session, or the agent itself."""


class AcpTransientError(AcpError, TransientError):
    """An ACP turn's error whose text matches the client's ``retry_on``."""


class RemoteError(AcpError):
    """The agent answered one of our requests with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        self.method = method
        self.code = code
        self.data = data
        super().__init__(f"acp: {method} failed: {message} ({code})")


class StorageError(NexusflowError):
    """A record a run needs to resume could not be written or read: the run fails rather
    than report a result it could not keep."""


class SessionBusyError(NexusflowError):
    """A second live run of one session: it would run every step twice."""

    def __init__(self, session_id: str, flow_run_id: str) -> None:
        self.session_id = session_id
        self.flow_run_id = flow_run_id
        super().__init__(f'session: "{session_id}" is already running (flow run {flow_run_id})')


class SessionLockError(NexusflowError):
    """A session whose lock stays held by a run that neither beats nor lets go: a take-over
    ends here, within a bound, instead of waiting for ever."""

    def __init__(self, session_id: str, lock: str, seconds: float) -> None:
        self.session_id = session_id
        self.lock = lock
        super().__init__(
            f'session: "{session_id}" could not be taken over within {seconds:.0f}s: its lock (the Prefect'
            f" concurrency limit {lock}) stays held by a run that does not beat; if no run of this session is"
            f" alive, delete the lock (prefect gcl delete {lock}) and run it again"
        )


class SessionLiveError(NexusflowError):
    """A session that runs cannot be forgotten: its run would go on without its records."""

    def __init__(self, session_id: str, flow_run_id: str | None) -> None:
        self.session_id = session_id
        super().__init__(
            f'session: "{session_id}" is running (flow run {flow_run_id}): it cannot be forgotten while it runs'
        )


class SessionTakenOverError(NexusflowError):
    """This run stopped beating for longer than a contender waits, and the session was taken
    over: it stops at once rather than run beside the new holder."""

    def __init__(self, session_id: str, seconds: float) -> None:
        self.session_id = session_id
        super().__init__(
            f'session: "{session_id}" was taken over by another run while this one stood still for {seconds:.0f}s'
            " (no heartbeat): this run stops; the session goes on in the other"
        )


class PrefectApiError(NexusflowError):
    """The Prefect API failed even after retries (a 5xx, a locked database, no connection)."""

    def __init__(self, exc: BaseException) -> None:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        if len(text) > 300:
            text = text[:300] + "..."
        super().__init__(f"prefect: {type(exc).__name__}: {text}" if text else f"prefect: {type(exc).__name__}")


class SubscriptionLimitError(NexusflowError):
    """A subscription limit (``limit=``, ``max_concurrent=``, ``per_minute=``) that cannot be held."""


class UsageError(NexusflowError):
    """A command line that cannot run as given: exit status 2, one line."""


class StyleCheckFailed(NexusflowError):
    """The ``styles_canary`` flow found the installed CLI no longer does what its style says."""


def style_checks_failed(style: str, command: str, version: str, failed: list[tuple[str, str]]) -> StyleCheckFailed:
    """One line naming the CLI, its version and each failed check with what it saw."""
    checks = "; ".join(f"{name}: {' '.join(detail.split())}" for name, detail in failed)
    return StyleCheckFailed(f"styles canary: {style} CLI {command} ({version}) failed {checks}")


class CassetteError(NexusflowError):
    """A cassette cannot be used as asked: missing in replay, unreadable, or of another
    version. Never a fall-through to a live call."""


CASSETTE_DIFF_LINES = 40
"""A mismatch shows at most this many lines of its diff..."""
CASSETTE_LINE_WIDTH = 200
"""...each cut to this many characters: a long message is told apart by where it starts."""


class CassetteMismatch(CassetteError, ModelError):
    """A replayed launch asked what the cassette never recorded: the code under test (or
    nexusflow's envelope, or a tool's result) drifted since the recording. ``diff``: the
    unified diff of the request against the nearest recording, empty when there is none."""

    def __init__(self, path: object, turn: int | None, launch: int, nearest: str, diff: list[str]) -> None:
        self.turn = turn
        shown = [line if len(line) <= CASSETTE_LINE_WIDTH else line[: CASSETTE_LINE_WIDTH - 3] + "..." for line in diff]
        if len(shown) > CASSETTE_DIFF_LINES:
            shown = [*shown[:CASSETTE_DIFF_LINES], f"... ({len(shown) - CASSETTE_DIFF_LINES} more lines)"]
        self.diff = "\n".join(shown)
        where = f"turn {turn}" if turn is not None else "a turn"
        attempt = f" (launch {launch})" if launch > 1 else ""
        told = f"cassette: {path} has no recording for {where}{attempt}; {nearest}"
        super().__init__(f"{told}:\n{self.diff}" if shown else told)


class CassetteExportError(CassetteError):
    """A session cannot become a cassette: there is no such session, it still runs, or its
    records lack what a cassette needs (see ``nexusflow.testing.export_cassette``)."""


class CrashTestError(NexusflowError):
    """``nexusflow.testing.crash_at_every_step`` cannot test the program: its run without a
    kill failed, or stored no step to kill it after."""


class CrashResumeError(CrashTestError):
    """A program killed at a step boundary did not resume as nexusflow promises: ``boundary``
    says where it was killed (the first such boundary), ``report`` (a ``CrashReport``) what
    happened at every one."""

    def __init__(self, program: str, boundary: str, why: str, report: object) -> None:
        self.boundary = boundary
        self.report = report
        super().__init__(f"crash test of {program}: killed {boundary}: {why}")


class AlertsError(NexusflowError):
    """``install_alerts`` cannot send through the block it was given; nothing was changed."""


class RunRequestError(NexusflowError):
    """A tool of ``nexusflow mcp`` that refused its request: nothing was started, answered or
    cancelled, and the client reads this one line as the tool's error."""
