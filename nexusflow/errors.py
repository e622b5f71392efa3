"""Every error nexusflow raises, with its pinned message.

Messages are written here and nowhere else, so docs, tests and users can rely on them: a
module raises a class or a factory's exception from here, and gives it only values and the
names of what it checks (a call, an argument, what it expected). Worded where they are raised
are only an ``AssertionError`` (an invariant), an ``AttributeError`` from a module's
``__getattr__`` (Python's wording), and a ``ValueError`` that is caught on the spot and never
reaches a user; ``tests/test_errors.py`` lists those and checks the rest. ``Suspended`` is
defined beside the request it holds, a layer above this module; its message is here.

Tool-level failures are not exceptions: they become error results the model reads
(see ``tool_error_*`` below), because a bad tool call must never crash a run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ._secrets import redact

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import ValidationError


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


def map_member_never_started(session_id: str, seconds: float) -> MapMemberLost:
    return MapMemberLost(
        session_id,
        seconds,
        f"has not started {seconds:.0f}s after it was sent to its task runner, while nothing else in its batch"
        " moved: the process it was sent to is frozen or gone (a Dask worker stopped, or a cluster with no"
        " worker left)",
    )


def agent_job_needs_a_style() -> NexusflowError:
    return NexusflowError("agent_job: command and model need a style")


def agent_job_failed(error: str | None) -> NexusflowError:
    """The job's flow run fails with the run's own error; expected whatever it was: the run
    logged a bug's traceback already, and this one would only point at the job's ``raise``."""
    return NexusflowError(error or "the agent run failed")


def agent_job_not_waiting(session_id: str) -> NexusflowError:
    return NexusflowError(f'agent_job: session "{session_id}" is not waiting for an answer')


def _problems(exc: ValidationError, root: str = "(root)") -> str:
    """Pydantic's errors on one line: each one's place and what is wrong there."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or root}: {err['msg']}" for err in exc.errors(include_input=False)
    )


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def _size(limit: int) -> str:
    """A size limit in bytes, as MiB when it is whole MiB."""
    return f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"


class ArgumentError(NexusflowError, TypeError, ValueError):
    """A public call was given what it cannot use: refused where it is given, in one line
    naming the call and the argument, never deep inside a run."""

    def __init__(self, message: str, argument: str) -> None:
        self.argument = argument
        super().__init__(message)


def argument_wrong(where: str, argument: str, expected: str, value: object) -> ArgumentError:
    return ArgumentError(f"{where}: {argument} must be {expected}, not {_shown(value)}", argument)


def option_refused(where: str, option: str, why: str, value: object) -> ArgumentError:
    return ArgumentError(f"{where}: {option}: {why}, not {_shown(value)}", option)


def setting_refused(variable: str, why: str, value: object) -> ArgumentError:
    return ArgumentError(f"{variable}: {why}, not {_shown(value)}", variable)


def setting_not_a_pattern_list() -> ValueError:
    """Raised in a settings validator: ``setting_refused`` quotes it with the variable's name."""
    return ValueError("not a JSON list of regular expressions")


def option_unknown(where: str, option: str, known: list[str]) -> ArgumentError:
    return ArgumentError(f"{where}: {option} is not an option (the options: {', '.join(sorted(known))})", option)


def tool_steps_take_no_retries() -> ValueError:
    """Raised in ``TaskConfig``'s validator: pydantic reports it, ``option_refused`` quotes it."""
    return ValueError(
        "tool steps take no Prefect retries: a tool may have side effects; "
        "use ToolPolicy(retries=...) for errors that say nothing happened"
    )


def wait_steps_take_no_retries() -> ValueError:
    """Raised in ``TaskConfig``'s validator, as ``tool_steps_take_no_retries``."""
    return ValueError("wait steps take no Prefect retries: a retried wait would ask a person again")


class ToolkitError(NexusflowError):
    """A toolkit could not be built: a bad tool, ``mcp.json`` or skills folder."""


def tools_no_such_file(name: str) -> ToolkitError:
    return ToolkitError(f"tools: no such file: {name}")


def tools_spec_malformed(spec: str) -> ToolkitError:
    return ToolkitError(f"tools: expected module:function or file.py:function, got {spec!r}")


def tools_import_failed(module: str, exc: BaseException) -> ToolkitError:
    return ToolkitError(f"tools: cannot import {module}: {type(exc).__name__}: {exc}")


def tools_no_attribute(module: str, attribute: str) -> ToolkitError:
    return ToolkitError(f"tools: {module} has no {attribute!r}")


def tool_signature_unreadable(name: str, exc: BaseException) -> ToolkitError:
    return ToolkitError(f'tool "{name}": cannot read its signature: {exc}')


def tool_takes_variadic_arguments(name: str) -> ToolkitError:
    return ToolkitError(f'tool "{name}": *args and **kwargs cannot be described to a model')


def toolkit_duplicate_tool(name: str, first: str, second: str) -> ToolkitError:
    """``first`` and ``second`` say where each tool comes from (an MCP server, a Python tool)."""
    return ToolkitError(
        f'toolkit: two tools are named "{name}" ({first} and {second});'
        ' rename one, or give an MCP server a "toolPrefix"'
    )


def mcp_config_unreadable(where: str, exc: OSError) -> ToolkitError:
    return ToolkitError(f"mcp: cannot read {where}: {exc.strerror or exc}")


def mcp_config_not_json(where: str, exc: json.JSONDecodeError) -> ToolkitError:
    return ToolkitError(f"mcp: {where} is not JSON: {exc.msg} at line {exc.lineno}")


def mcp_config_invalid(where: str, exc: ValidationError) -> ToolkitError:
    """Names the offending keys, never a value: a header or env value may be a secret."""
    return ToolkitError(f"mcp: invalid {where}: {_problems(exc, root='')}")


def skills_no_front_matter(path: Path) -> ToolkitError:
    return ToolkitError(f"skills: {path}: no front matter (a '---' block with name and description)")


def skills_front_matter_unclosed(path: Path) -> ToolkitError:
    return ToolkitError(f"skills: {path}: front matter is not closed by '---'")


def skills_front_matter_not_yaml(path: Path, exc: BaseException) -> ToolkitError:
    return ToolkitError(f"skills: {path}: front matter is not YAML: {exc}")


def skills_front_matter_not_mapping(path: Path) -> ToolkitError:
    return ToolkitError(f"skills: {path}: front matter must be a mapping")


def skills_front_matter_incomplete(path: Path, exc: ValidationError) -> ToolkitError:
    missing = ", ".join(str(err["loc"][0]) for err in exc.errors())
    return ToolkitError(f"skills: {path}: front matter needs a string {missing}")


def skills_not_a_directory(root: Path) -> ToolkitError:
    return ToolkitError(f"skills: {root} is not a directory")


def skills_duplicate(name: str, first: Path, second: Path) -> ToolkitError:
    return ToolkitError(f'skills: two skills are named "{name}": {first} and {second}')


class McpServerError(ToolkitError):
    def __init__(self, server: str, reason: str) -> None:
        self.server = server
        super().__init__(f'mcp: server "{server}" failed to start: {reason}')


def mcp_server_failed(server: str, exc: BaseException, startup_timeout: float, stderr: str) -> McpServerError:
    """``stderr``: the end of what a stdio server printed, empty when it printed nothing."""
    reason = (
        f"no answer within startupTimeout ({startup_timeout:g}s)" if isinstance(exc, TimeoutError) else describe(exc)
    )
    if stderr:
        reason = f"{reason}; its stderr ends with:\n{stderr}"
    return McpServerError(server, reason)


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


def model_empty_reply() -> ModelError:
    return ModelError("model: empty reply (no content and no tool calls)")


def model_reply_invalid(exc: ValidationError) -> ModelError:
    return ModelError(f"model: invalid reply: {_problems(exc)}")


def model_reply_unusable(value: object) -> ModelError:
    return ModelError(f"model: invalid reply: expected a ModelReply, a dict or a str, got {type(value).__name__}")


def model_generate_raised(exc: BaseException, transient: bool) -> ModelError:
    """A ``TransientError`` when ``transient`` (a rate limit, a server error, no connection)."""
    if transient:
        return TransientError(f"model: generate raised {type(exc).__name__}: {exc}")
    failure = ModelError(f"model: generate raised {type(exc).__name__}: {exc}")
    failure.expected = False
    return failure


def scripted_model_has_no_reply(turn: int, scripted: int) -> ModelError:
    return ModelError(f"model: the scripted model has no reply for turn {turn} ({scripted} scripted)")


def scripted_call_not_json(exc: json.JSONDecodeError) -> ModelError:
    return ModelError(f"model: a `call` line's arguments are not JSON: {exc.msg}")


class HookError(NexusflowError):
    expected = False

    def __init__(self, hook: str, exc: BaseException) -> None:
        super().__init__(f"hook {hook} raised {type(exc).__name__}: {exc}")


def hook_returned(hook: str, value: object) -> HookError:
    return HookError(hook, TypeError(f"returned an unsupported {type(value).__name__}"))


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


def output_mismatch(type_name: str, repairs: int, errors: str) -> OutputError:
    return OutputError(f"output: the final answer does not match {type_name} after {repairs} repairs: {errors}")


def output_unusable(type_name: str, why: str) -> OutputError:
    return OutputError(f"output: {type_name} cannot be an output type: {why}")


def output_not_importable(spec: str, exc: ToolkitError) -> OutputError:
    return output_unusable(spec, str(exc).removeprefix("tools: "))


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


def wait_for_returned(value: object) -> TypeError:
    return TypeError(f"wait_for returned {type(value).__name__}, not an Answer")


def suspended_message(prompt: str) -> str:
    """The message of ``nexusflow.Suspended``, which stays beside the ``Request`` it holds
    (a layer above this module); it is the pending run's state message."""
    return f"pending: {prompt}"


class NoRuntimeError(NexusflowError):
    def __init__(self) -> None:
        super().__init__("agent_run needs a client and a toolkit: start it with `await client.run(prompt, toolkit)`")


def tool_error_unknown(name: str, known: list[str]) -> str:
    listed = ", ".join(sorted(known)) or "none"
    return f'error: unknown tool "{name}" (available: {listed})'


def tool_error_arguments(name: str, detail: str) -> str:
    return f'error: invalid arguments for tool "{name}": {detail}'


def arguments_not_an_object(value: object) -> ValueError:
    """``ToolCall.parsed_arguments`` on arguments that decode to something else."""
    return ValueError(f"arguments must be a JSON object, got {type(value).__name__}")


def tool_error_timed_out(name: str, seconds: float) -> str:
    return f'error: tool "{name}" timed out after {seconds:g}s'


def tool_error_raised(name: str, exc: BaseException) -> str:
    return f'error: tool "{name}" raised {type(exc).__name__}: {exc}'


def tool_error_not_run(name: str, calls: int, limit: int) -> str:
    """A call past ``max_tool_calls`` in one reply: answered without a task run of its own."""
    return (
        f'error: tool "{name}" was not run: the reply asked for {calls} tool calls, and at most {limit} run per'
        " reply (max_tool_calls); ask again for those still needed"
    )


def tool_error_too_large(name: str, size: int, limit: int) -> str:
    """A result past ``max_tool_result``, worded as the CLI's output limit (``cli_output_limit``)."""
    return f'error: tool "{name}" returned {size} bytes, over the {_size(limit)} result limit'


def tool_error_too_deep(name: str, depth: int) -> str:
    return f'error: invalid arguments for tool "{name}": they nest deeper than {depth} levels (max_argument_depth)'


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


def cli_command_required() -> CliError:
    return CliError("cli: Command is required (path or name of the CLI binary)")


def cli_not_found(command: str) -> CliError:
    return CliError(f"cli: command not found: {command}")


def cli_timed_out(milliseconds: int) -> CliError:
    return CliError(f"cli: timed out after {milliseconds}ms")


def cli_exit(code: int, stderr: str) -> CliError:
    text = redact(stderr).strip()  # before the cap, which could cut a secret in two
    if len(text) > 1000:
        text = text[-1000:]
    return CliError(f"cli: exit {code}: {text}")


def cli_no_output_file() -> CliError:
    return CliError("cli: no output file")


def cli_empty_reply() -> CliError:
    return CliError("cli: empty reply")


def cli_output_limit(stream: str, limit: int) -> CliError:
    return CliError(f"cli: {stream} passed the {_size(limit)} output limit")


def cli_takes_no_model(style: str) -> CliError:
    return CliError(f'cli: style "{style}" takes no model')


def cli_needs_a_model(style: str) -> CliError:
    return CliError(f'cli: style "{style}" needs a model: its {{{{model}}}} is not in an optional group')


def cli_transport_unknown(transport: object) -> CliError:
    return CliError(f"cli: transport must be a Transport member, got {transport!r}")


def cli_permission_denied(command: str) -> CliError:
    return CliError(f"cli: cannot run {command}: permission denied")


def cli_not_utf8(what: str, data: bytes, position: int) -> CliError:
    """``what``: the output, or the output file."""
    return CliError(f"cli: {what} is not UTF-8: byte 0x{data[position]:02x} at position {position}")


def cli_output_not_json(field: str, text: str) -> CliError:
    return CliError(f"cli: expected JSON output with a {field!r} field, got: {redact(text).strip()[:200]}")


def cli_output_lacks_field(field: str, text: str) -> CliError:
    return CliError(f"cli: the JSON output has no {field!r} field: {redact(text).strip()[:200]}")


def cli_reported_error(said: str) -> CliError:
    """``said``: the output from the style's error marker on."""
    text = redact(said)  # before the cap, which could cut a secret in two
    return CliError(f"cli: the CLI reported an error: {text.strip()[:1000]}")


def cli_malformed_reply(launches: int, complaint: str | None) -> CliError:
    return CliError(f"cli: malformed reply after {launches} launches: {complaint}")


def cli_prompt_too_long(size: int, limit: int, style: str) -> CliError:
    return CliError(
        f"cli: the prompt is {size} bytes, over the {limit // 1024} KiB limit of one"
        f' argument; style "{style}" passes it as an argument: use a style whose prompt_mode is'
        " stdin or file"
    )


def cli_style_wrong_type(style: object) -> CliError:
    return CliError(
        f"cli: style must be a CliStyles member or a CliStyle, got {type(style).__name__}"
        " (a name from text goes through CliStyles.parse)"
    )


def cli_style_fields_not_custom(fields: Iterable[str]) -> CliError:
    return CliError(f"cli: style fields ({', '.join(sorted(fields))}) are for style=CliStyles.CUSTOM")


def cli_style_unknown(name: str, known: Iterable[str]) -> CliError:
    return CliError(f'cli: unknown style "{name}" (styles: {", ".join(known)})')


def cli_style_unreadable(where: str, exc: OSError) -> CliError:
    return CliError(f"cli: cannot read style {where}: {exc.strerror or exc}")


def cli_style_not_json(where: str, exc: json.JSONDecodeError) -> CliError:
    return CliError(f"cli: style {where} is not JSON: {exc.msg} at line {exc.lineno}")


def cli_style_invalid(where: str, exc: ValidationError) -> CliError:
    return CliError(f"cli: invalid style {where}: {_problems(exc)}")


def cli_custom_style_has_no_file() -> CliError:
    return CliError("cli: CliStyles.CUSTOM has no file: pass its fields (args, prompt_mode, ...)")


def style_unknown_placeholder(name: str) -> ValueError:
    """Raised in ``CliStyle``'s validators (as the two below): ``cli_style_invalid`` quotes it."""
    return ValueError(f"unknown placeholder {{{{{name}}}}}")


def style_mode_lacks_placeholder(prompt_mode: str, needed: str) -> ValueError:
    return ValueError(f"prompt_mode {prompt_mode!r} needs {{{{{needed}}}}} in args")


def style_answer_file_lacks_out() -> ValueError:
    return ValueError("answer 'file' needs {{out}} in args")


def arguments_too_deep(depth: int) -> ValueError:
    """Why a one-shot reply's call arguments are refused (as the two below): its complaint
    quotes it, and so does ``cli_malformed_reply`` once the repairs run out."""
    return ValueError(f"nest deeper than {depth} levels")


def arguments_not_json(exc: json.JSONDecodeError) -> ValueError:
    return ValueError(f"are not valid JSON: {exc.msg}")


def arguments_number_too_long() -> ValueError:
    return ValueError("are not valid JSON: a number too long")


class CliTransientError(CliError, TransientError):
    """A CLI failure whose text matches the client's ``retry_on``."""

    def __init__(self, message: str, launches: int) -> None:
        super().__init__(message)
        self.launches = launches


def cli_replayed_failure(message: str) -> CliError:
    """A launch's own failure (a timeout, an output limit) as a cassette recorded it."""
    return CliError(message)


def cli_retry_pattern(pattern: str, why: str) -> CliError:
    return CliError(f"cli: retry_on pattern {pattern!r} is not a regular expression: {why}")


class AcpError(ModelError):
    """The ACP transport failed: handshake, session, or the agent itself."""


class AcpTransientError(AcpError, TransientError):
    """An ACP turn's error whose text matches the client's ``retry_on``."""


def acp_timed_out(milliseconds: int) -> AcpError:
    return AcpError(f"acp: timed out after {milliseconds}ms")


def acp_line_too_long(limit: int) -> AcpError:
    return AcpError(f"acp: the agent wrote a line over {limit / 2**20:g} MiB")


class RemoteError(AcpError):
    """The agent answered one of our requests with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        self.method = method
        self.code = code
        self.data = data
        super().__init__(f"acp: {method} failed: {message} ({code})")


def acp_unavailable(why: str) -> AcpError:
    """ACP was asked for, and this client cannot have it; ``why`` is one of the reasons below."""
    return AcpError(f"acp: {why}")


def no_acp_asked() -> str:
    """Why a client has no ACP launch (as the two below): the reason the transport's choice logs."""
    return "the client asked for the one-shot transport"


def no_acp_declared(style: str) -> str:
    return f'style "{style}" declares no ACP launch'


def no_acp_in_cassette(path: object) -> str:
    return f"the cassette {path} holds no ACP session of this style to replay"


def no_acp_adapter(style: str) -> str:
    return f'style "{style}" speaks ACP through an adapter: pass its path as acp_command'


def acp_not_found(command: str) -> AcpError:
    return AcpError(f"acp: command not found: {command}")


def acp_permission_denied(command: str) -> AcpError:
    return AcpError(f"acp: cannot run {command}: permission denied")


def acp_cwd_outside(cwd: object, where: object, root: object) -> AcpError:
    return AcpError(f"acp: the session cwd {cwd} resolves to {where}, outside the workspace {root}")


def acp_no_initialize(command: str, seconds: float) -> AcpError:
    return AcpError(f"acp: {command} did not answer initialize within {seconds:g}s")


def acp_initialize_not_object(reply: object) -> AcpError:
    return AcpError(f"acp: initialize answered {type(reply).__name__}, not an object")


def acp_protocol_version(version: object, ours: int) -> AcpError:
    return AcpError(f"acp: the agent answered protocolVersion {json.dumps(version)}; nexusflow speaks {ours}")


def acp_no_session_id() -> AcpError:
    return AcpError("acp: session/new answered no sessionId")


def acp_cannot_set_model() -> AcpError:
    return AcpError(
        "acp: the agent has no model config option and no session/set_model: drop the model"
        " or choose it in the agent's own settings"
    )


def acp_turn_timed_out(milliseconds: int, stop_reason: object) -> AcpError:
    """``stop_reason``: what the agent answered the cancelled prompt with, if it answered."""
    how = (
        f"the agent ended the turn: {stop_reason}"
        if stop_reason
        else "the agent did not answer; its process group was killed"
    )
    return AcpError(f"{acp_timed_out(milliseconds)} ({how})")


def acp_prompt_failed(exc: BaseException) -> AcpError:
    return AcpError(f"acp: session/prompt failed: {describe(exc)}")


def acp_input_closed() -> AcpError:
    return AcpError("acp: the agent closed its input")


def acp_exited() -> AcpError:
    return AcpError("acp: the agent exited")


def acp_exit_detail(code: int | None, stderr: str) -> str:
    """How the agent ended, to follow an error: its exit status and the end of its stderr."""
    detail = f" (exit {code})" if code is not None else ""
    return f"{detail}: {stderr}" if stderr else detail


def acp_exited_during_turn(detail: str) -> AcpError:
    return AcpError(f"acp: the agent exited during the turn{detail}")


def acp_ended(exc: AcpError, detail: str) -> AcpError:
    """``exc`` told with how the agent ended (``acp_exit_detail``)."""
    return AcpError(f"{exc}{detail}")


class StorageError(NexusflowError):
    """A record a run needs to resume could not be written or read: the run fails rather
    than report a result it could not keep."""


def storage_cannot_list(kind: str) -> StorageError:
    return StorageError(
        f"storage: nexusflow cannot list or delete records in a {kind} (it knows the local file system and S3 buckets)"
    )


def storage_step_failed(step: str, key: str, why: str) -> StorageError:
    return StorageError(f"storage: the result of {step} could not be stored under {key}: {why}")


def storage_step_rolled_back(step: str, key: str) -> StorageError:
    return storage_step_failed(step, key, "its transaction was rolled back (the log says why)")


def storage_step_unsynced(step: str, key: str, exc: BaseException | None) -> StorageError:
    """``exc``: what the record's sync raised; None when it was cancelled."""
    why = f"{type(exc).__name__}: {exc}" if exc is not None else "its sync was cancelled"
    return storage_step_failed(step, key, why)


def storage_write_failed(key: str, exc: BaseException) -> StorageError:
    return StorageError(f"storage: could not write {key}: {type(exc).__name__}: {exc}")


def storage_read_failed(key: str, exc: BaseException) -> StorageError:
    return StorageError(f"storage: could not read {key}: {type(exc).__name__}: {exc}")


def storage_record_unreadable(key: str, exc: BaseException) -> StorageError:
    return StorageError(f"storage: the record {key} is unreadable: {exc}")


def storage_inputs_missing(reference: str, session_id: str) -> StorageError:
    return StorageError(f'storage: the inputs "{reference}" of session "{session_id}" are not in result storage')


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


def sessions_bad_duration(text: str) -> ArgumentError:
    return ArgumentError(
        f"sessions: {text!r} is not a duration: give a number and a unit, s, m, h, d or w (7d, 12h, 0s)", "older_than"
    )


def sessions_duration_too_long(text: str, longest: str) -> ArgumentError:
    """Past ``longest`` the cutoff would fall before the year 1 (``OverflowError``)."""
    return ArgumentError(f"sessions: {text!r} is too long a duration: at most {longest}", "older_than")


def sessions_bad_state(name: str, known: Iterable[str]) -> ArgumentError:
    return ArgumentError(f"sessions: {name!r} is not a state (the states: {', '.join(known)})", "state")


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


def limit_name_invalid(name: object) -> SubscriptionLimitError:
    return SubscriptionLimitError(f"limit: invalid name {name!r}: use 1-100 letters, digits, '-' or '_'")


def limit_without_bounds(name: str) -> SubscriptionLimitError:
    return SubscriptionLimitError(f'limit "{name}": give max_concurrent, per_minute or both')


def limit_concurrency_invalid(name: str, value: object) -> SubscriptionLimitError:
    return SubscriptionLimitError(f'limit "{name}": max_concurrent must be a positive integer, not {value!r}')


def limit_rate_invalid(name: str, value: object) -> SubscriptionLimitError:
    return SubscriptionLimitError(f'limit "{name}": per_minute must be a positive number, not {value!r}')


def limit_without_name() -> SubscriptionLimitError:
    return SubscriptionLimitError("limit: max_concurrent and per_minute need a limit name (limit=...)")


class UsageError(NexusflowError):
    """A command line that cannot run as given: exit status 2, one line."""


def usage_no_command() -> UsageError:
    return UsageError(
        "a COMMAND is needed: run, demo, answer, show, sessions, forget, prune, server, styles, alerts or mcp-bridge"
        " (see nexusflow --help)"
    )


def usage_no_styles_command() -> UsageError:
    return UsageError("styles needs a COMMAND: list or verify")


def usage_no_alerts_command() -> UsageError:
    return UsageError("alerts needs a COMMAND: install, list or remove")


def usage_session(exc: SessionIdError) -> UsageError:
    return UsageError(f"--session: {exc}")


def usage_tools(exc: ToolkitError) -> UsageError:
    return UsageError(str(exc).replace("tools:", "--tools:", 1))


def usage_files(exc: ToolkitError) -> UsageError:
    """An ``mcp.json`` or skills folder refused, named by its flag."""
    text = str(exc)
    for prefix, flag in (("mcp:", "--mcp:"), ("skills:", "--skills:")):
        text = text.replace(prefix, flag, 1) if text.startswith(prefix) else text
    return UsageError(text)


def usage_output_type(exc: OutputError) -> UsageError:
    return UsageError(str(exc).replace("output:", "--output-type:", 1))


def usage_script_unreadable(path: Path, exc: BaseException) -> UsageError:
    return UsageError(f"--script: cannot read {path}: {exc}")


def usage_script_not_a_list() -> UsageError:
    return UsageError("--script: the file must hold a JSON list of replies")


def usage_data_not_json(exc: json.JSONDecodeError) -> UsageError:
    return UsageError(f"--data must be JSON: {exc.msg}")


def usage_not_installed(flag: str, command: str) -> UsageError:
    return UsageError(f"{flag}: {cli_not_found(command)}")


def usage_max_turns(value: int) -> UsageError:
    return UsageError(f"--max-turns must be 1 or more, not {value}")


def usage_budget(flag: str, value: float) -> UsageError:
    return UsageError(f"{flag} must be more than 0, not {value:g}")


def usage_timeout(value: float) -> UsageError:
    return UsageError(f"--timeout must be more than 0 seconds and finite, not {value:g}")


def usage_command_without_style() -> UsageError:
    return UsageError("--command and --model need --style (or --style-file)")


def usage_script_with_style() -> UsageError:
    return UsageError("--script plays the scripted model; it does not go with --style")


def usage_custom_style() -> UsageError:
    return UsageError("--style custom has no fields on the command line: describe it in a file, --style-file")


def usage_answer_with_prompt() -> UsageError:
    return UsageError("--answer goes on with the session's own prompt: give no PROMPT")


def usage_answer_without_session() -> UsageError:
    return UsageError("--answer needs --session ID: the pending run to answer")


def usage_answer_without_decision() -> UsageError:
    return UsageError("answer needs a decision: pass --approve or --deny")


def usage_no_prompt_stored(session_id: str) -> UsageError:
    return UsageError(
        f'session "{session_id}" was not started by nexusflow run (no prompt and flags of it are stored): give a PROMPT'
    )


def usage_no_prompt() -> UsageError:
    return UsageError("run needs a PROMPT (or --session ID: the session's own prompt and flags, run again)")


def usage_empty_prompt() -> UsageError:
    return UsageError("run needs a PROMPT with something in it; this one is empty")


def usage_session_not_waiting(session_id: str) -> UsageError:
    return UsageError(f'session "{session_id}" is not waiting for an answer')


def usage_session_from_python(session_id: str, request_id: str, ok: bool) -> UsageError:
    """Never a swap of the model: the command cannot rebuild a Python ``generate``."""
    return UsageError(
        f'session "{session_id}" was started from Python with its own model, which the command cannot rebuild: '
        f'resume it there with await client.resume("{session_id}", Answer(id="{request_id}", ok={ok}), toolkit)'
    )


def usage_tool_missing(session_id: str, tool: str) -> UsageError:
    return UsageError(
        f'session "{session_id}" waits to run the tool "{tool}", which this toolkit lacks: '
        "give the --tools (--mcp, --skills) it was started with"
    )


def usage_no_flow_run(flow_run_id: str) -> UsageError:
    return UsageError(f"no flow run {flow_run_id} on this Prefect server")


def usage_flow_run_not_waiting(flow_run_id: str, state: str | None) -> UsageError:
    """``state``: the flow run's state name, None before it started."""
    return UsageError(
        f"flow run {flow_run_id} is not waiting for an answer: it is {'not started' if state is None else state}"
    )


def usage_no_run(run_id: str) -> UsageError:
    return UsageError(f'no run is known as "{run_id}" (a session id or a flow run id) on this Prefect server')


def usage_no_verify_recipe(style: str) -> UsageError:
    return UsageError(f"styles verify has no scripted-server recipe for {style}")


def usage_server_running(home: Path, url: str) -> UsageError:
    return UsageError(f"a server for {home} is already running at {url}")


class StyleCheckFailed(NexusflowError):
    """The ``styles_canary`` flow found the installed CLI no longer does what its style says."""


def style_checks_failed(style: str, command: str, version: str, failed: list[tuple[str, str]]) -> StyleCheckFailed:
    """One line naming the CLI, its version and each failed check with what it saw."""
    checks = "; ".join(f"{name}: {' '.join(detail.split())}" for name, detail in failed)
    return StyleCheckFailed(f"styles canary: {style} CLI {command} ({version}) failed {checks}")


def server_not_running(home: Path) -> NexusflowError:
    """``nexusflow server --env`` with no server for the home: exit 1, nothing on stdout."""
    return NexusflowError(f"no nexusflow server runs for {home}; start one with `nexusflow server`")


def no_scripted_recipe(style: str) -> ValueError:
    """``nexusflow.testing``: a style its scripted model server cannot stand in for."""
    return ValueError(f"no scripted-server recipe for style {style}")


def scripted_server_not_started() -> RuntimeError:
    return RuntimeError("the scripted model server did not start")


def demo_no_weather(city: str) -> ValueError:
    """The demo's weather tool, asked for a city it has no reading for."""
    return ValueError(f"no weather station in {city}")


class CassetteError(NexusflowError):
    """A cassette cannot be used as asked: missing in replay, unreadable, or of another
    version. Never a fall-through to a live call."""


def cassette_missing(path: object) -> CassetteError:
    return CassetteError(
        f"cassette: {path} does not exist and the mode is replay: record it first (mode record or auto)"
    )


def cassette_unreadable(path: object, exc: OSError | UnicodeDecodeError) -> CassetteError:
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return CassetteError(f"cassette: {path} cannot be read: {why}")


def cassette_not_json(path: object, exc: json.JSONDecodeError) -> CassetteError:
    return CassetteError(f"cassette: {path} is not JSON: {exc.msg} at line {exc.lineno}")


def cassette_invalid(path: object, exc: ValidationError) -> CassetteError:
    return CassetteError(f"cassette: {path} is not a cassette: {_problems(exc)}")


def cassette_version(path: object, version: object, ours: Sequence[int]) -> CassetteError:
    *most, last = [str(number) for number in ours]
    read = f"{', '.join(most)} and {last}" if most else last
    return CassetteError(
        f"cassette: {path} is version {version!r}; this nexusflow reads version{'s' if len(ours) > 1 else ''}"
        f" {read}: record it again"
    )


def cassette_launch_mixed(exported: bool) -> ValueError:
    """Raised inside the file's validation, which reports it as ``cassette_invalid``."""
    if exported:
        return ValueError("an exported launch holds a reply and no answer, and what it asked holds no argv")
    return ValueError("a recorded launch holds an answer, and what it asked holds argv and prompt")


def cassette_reply_invalid(exc: ValidationError) -> ValueError:
    return ValueError(f"the reply is not a model's reply: {_problems(exc)}")


def cassette_export_in_version_1() -> ValueError:
    return ValueError("a version 1 cassette holds no exported launch")


def cassette_mode_unknown(mode: object) -> CassetteError:
    return CassetteError(f"cassette: mode must be record, replay or auto, not {mode!r}")


def cassette_acp_event_mixed() -> ValueError:
    """Raised inside the file's validation, which reports it as ``cassette_invalid``."""
    return ValueError("an ACP event holds exactly one of client, agent, raw, tool and ended")


def cassette_acp_before_version_3() -> ValueError:
    return ValueError("a cassette before version 3 holds no ACP session")


def cassette_no_acp_session(style: str) -> str:
    """What a mismatch says when the cassette holds no ACP session of the client's style (as
    the three below: why an ACP replay has no recording for what our client sent)."""
    return f'it holds no ACP session of style "{style}"'


def cassette_acp_nearest(what: str, turn: int | None) -> str:
    where = f"turn {turn}" if turn is not None else "the handshake"
    return f"the recorded {what} ({where}) differs"


def cassette_acp_ended(what: str) -> str:
    return f"the recorded session had ended; our client sent {what}"


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


def cassette_nothing_recorded() -> str:
    """What a mismatch says when the cassette holds no launch at all (as the two below)."""
    return "it holds no launch"


def cassette_nearest(turn: int | None, launch: int) -> str:
    where = f"turn {turn}" if turn is not None else "a turn"
    attempt = f", launch {launch}" if launch > 1 else ""
    return f"the nearest recording ({where}{attempt}) differs"


def cassette_played_out(times: int) -> str:
    return f"the same request was recorded {times} time{'s' if times != 1 else ''}, and each was played already"


class CassetteExportError(CassetteError):
    """A session cannot become a cassette: there is no such session, it still runs, or its
    records lack what a cassette needs (see ``nexusflow.testing.export_cassette``)."""


def export_no_session(session_id: str) -> CassetteExportError:
    return CassetteExportError(f"cassette export: no session {session_id!r} in the result storage")


def export_running(session_id: str, flow_run_id: str | None) -> CassetteExportError:
    run = f" (flow run {flow_run_id})" if flow_run_id else ""
    return CassetteExportError(
        f"cassette export: session {session_id!r} is running{run}; export it once its run has ended"
    )


def export_no_turns(session_id: str) -> CassetteExportError:
    return CassetteExportError(f"cassette export: session {session_id!r} has no finished turn to export")


def export_no_request(session_id: str, step: int) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} was stored without its request (by an earlier"
        " nexusflow); run the session again to export it"
    )


def export_hooked(session_id: str, step: int, hook: str) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} was changed by its {hook} hook; its record holds"
        " what the hook was given, not what the model was asked or said"
    )


def export_acp_steps(session_id: str, step: int) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} holds an ACP agent's own tool calls, but the"
        " session kept no agent session of its own client (a fallback's agent answered it)"
    )


def export_acp_style(session_id: str, style: str | None, found: int) -> CassetteExportError:
    """The ACP session's style is found by its name: none of the built-in names (or the one
    given) fits, or several do."""
    if style is not None:
        why = f"its client's style is not {style!r}"
    elif found:
        why = "its clients had more than one style; name the one to export (--style NAME)"
    else:
        why = "its client's style is none of the built-in ones; name it (--style NAME)"
    return CassetteExportError(f"cassette export: session {session_id!r} ran on ACP and {why}")


def export_acp_answered_by(session_id: str, step: int, client: str) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} was answered by the fallback client {client!r};"
        " an exported ACP session replays its own client's agent"
    )


def export_acp_tool_unstored(session_id: str, step: int, tool: str) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} called {tool}, whose record is not in the result"
        " storage; the exported agent could not say what it received"
    )


def export_ambiguous(session_id: str, step: int) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: session {session_id!r} holds the turns of more than one run from turn {step} on (its"
        " prompt or settings changed between runs); forget it and run it again to export one"
    )


class CrashTestError(NexusflowError):
    """``nexusflow.testing.crash_at_every_step`` cannot test the program: its run without a
    kill failed, or stored no step to kill it after."""


def crash_uninterrupted_failed(program: str, ended: str, stderr: str) -> CrashTestError:
    return CrashTestError(f"crash test of {program}: the uninterrupted run {ended}:\n{stderr}")


def crash_no_steps(program: str) -> CrashTestError:
    return CrashTestError(
        f"crash test of {program}: the uninterrupted run stored no step record (it runs no agent of nexusflow's)"
    )


class CrashResumeError(CrashTestError):
    """A program killed at a step boundary did not resume as nexusflow promises: ``boundary``
    says where it was killed (the first such boundary), ``report`` (a ``CrashReport``) what
    happened at every one."""

    def __init__(self, program: str, boundary: str, why: str, report: object) -> None:
        self.boundary = boundary
        self.report = report
        super().__init__(f"crash test of {program}: killed {boundary}: {why}")


def crash_boundary(killed_after: int, steps: int, step: str | None) -> str:
    """Where a run was killed: before its first step, or once its k-th step record was stored."""
    if killed_after == 0:
        return "before the first step"
    return f"after step {killed_after} of {steps} ({step})"


def crash_ended(code: int | None, timeout: float) -> str:
    """How a process ended; ``None``: it was stopped after ``timeout`` seconds."""
    if code is None:
        return f"did not end within {timeout:g}s"
    if code < 0:
        return f"was killed by signal {-code}"
    return f"exited with {code}"


def crash_not_killed(ended: str, stored: int) -> str:
    return f"it was not killed there: it {ended} with {stored} step record{'s' if stored != 1 else ''} stored"


def crash_resume_failed(ended: str, stderr: str) -> str:
    return f"the resume {ended}:\n{stderr}"


def crash_ran_again(steps: Iterable[str]) -> str:
    return f"the resume ran again what was stored before the kill: {', '.join(steps)}"


def crash_tools_again(tools: Iterable[str]) -> str:
    return (
        "a tool ran more often than in the uninterrupted run, beyond the calls in flight at the kill:"
        f" {', '.join(tools)}"
    )


def crash_output_differs(expected: str, got: str) -> str:
    return f"the resumed run printed {got[-500:]!r} where the uninterrupted run printed {expected[-500:]!r}"


class AlertsError(NexusflowError):
    """``install_alerts`` cannot send through the block it was given; nothing was changed."""


def alerts_bad_block(slug: object) -> ArgumentError:
    return ArgumentError(
        f"alerts: --notify takes a block's <type>/<name>, like custom-webhook/night-alerts, not {slug!r}", "notify"
    )


def alerts_no_block(slug: str) -> AlertsError:
    return AlertsError(f'alerts: no block "{slug}" on the Prefect server: save the notification block first')


def alerts_not_notifying(slug: str) -> AlertsError:
    return AlertsError(
        f'alerts: block "{slug}" cannot send notifications: give a notification block '
        "(custom-webhook, slack-webhook, ms-teams-webhook, ...)"
    )


def alerts_bad_bound(name: str, value: object, shortest: timedelta, longest: timedelta) -> ArgumentError:
    return ArgumentError(
        f"alerts: --{name} must be a duration from {int(shortest.total_seconds())}s to {longest.days}d"
        f" (30s, 15m, 2h), not {value!r}",
        name,
    )


# Honest states (issue 42): the messages a run's Prefect state carries when nexusflow, not
# Prefect's engine, ends it.
def crashed_process_died(session_id: str, pid: int, found_by: str) -> str:
    return f'nexusflow: session "{session_id}": its process {pid} on this machine died; found by {found_by}'


def crashed_not_beating(session_id: str, seconds: float, found_by: str) -> str:
    return f'nexusflow: session "{session_id}": its run has not beaten for {seconds:.0f}s; found by {found_by}'


def cancelled_by_signal(session_id: str, signal_name: str) -> str:
    return (
        f'nexusflow: session "{session_id}": interrupted by {signal_name};'
        " it goes on from its finished steps when run again"
    )
