"""The transports' words: every message a model turn's transport raises or logs, pinned.

The one-shot CLI (``cli:``), the ACP session (``acp:``), the in-process ``generate``
(``model:``) and the cassette (``cassette:``) word their failures here, beside the code that
meets them, so a change to how a transport speaks stays in the transports. The classes are
in ``nexusflow.errors``. A message quoting what a CLI printed is redacted as it is built: Prefect records it too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .._support.secrets import redact
from .._support.wording import problems, shown_size
from ..errors import AcpError, CassetteError, CliError, ModelError, TransientError, describe

if TYPE_CHECKING:
    from pydantic import ValidationError


def cli_not_found(command: str) -> CliError:
    return CliError(f"cli: command not found: {command}")


def model_reply_invalid(exc: ValidationError) -> ModelError:
    return ModelError(f"model: invalid reply: {problems(exc)}")


def model_reply_unusable(value: object) -> ModelError:
    return ModelError(f"model: invalid reply: expected a ModelReply, a dict or a str, got {type(value).__name__}")


def model_generate_raised(exc: BaseException, transient: bool) -> ModelError:
    """A ``TransientError`` when ``transient`` (a rate limit, a server error, no connection)."""
    if transient:
        return TransientError(f"model: generate raised {type(exc).__name__}: {exc}")
    failure = ModelError(f"model: generate raised {type(exc).__name__}: {exc}")
    failure.expected = False
    return failure


def cli_command_required() -> CliError:
    return CliError("cli: Command is required (path or name of the CLI binary)")


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
    return CliError(f"cli: {stream} passed the {shown_size(limit)} output limit")


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
    return CliError(f"cli: invalid style {where}: {problems(exc)}")


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


def cli_replayed_failure(message: str) -> CliError:
    """A launch's own failure (a timeout, an output limit) as a cassette recorded it."""
    return CliError(message)


def cli_retry_pattern(pattern: str, why: str) -> CliError:
    return CliError(f"cli: retry_on pattern {pattern!r} is not a regular expression: {why}")


def acp_timed_out(milliseconds: int) -> AcpError:
    return AcpError(f"acp: timed out after {milliseconds}ms")


def acp_line_too_long(limit: int) -> AcpError:
    return AcpError(f"acp: the agent wrote a line over {limit / 2**20:g} MiB")


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
    return CassetteError(f"cassette: {path} is not a cassette: {problems(exc)}")


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
    return ValueError(f"the reply is not a model's reply: {problems(exc)}")


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


def cassette_nothing_recorded() -> str:
    """What a mismatch says when the cassette holds no launch at all (as the two below)."""
    return "it holds no launch"


def cassette_nearest(turn: int | None, launch: int) -> str:
    where = f"turn {turn}" if turn is not None else "a turn"
    attempt = f", launch {launch}" if launch > 1 else ""
    return f"the nearest recording ({where}{attempt}) differs"


def cassette_played_out(times: int) -> str:
    return f"the same request was recorded {times} time{'s' if times != 1 else ''}, and each was played already"
