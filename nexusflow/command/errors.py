"""The command's words: every usage error (exit status 2, one line) and failure only the
``nexusflow`` command says, beside the command. The classes they raise stay in
``nexusflow/errors.py``, in the one hierarchy."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import NexusflowError, OutputError, SessionIdError, ToolkitError, UsageError


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
    for prefix, flag in (("mcp:", "--mcp-config:"), ("skills:", "--skills-dir:")):
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
    """The transports' own line, named by its flag. Imported here, when a CLI is missing:
    the transports' package loads the conversation's models, which ``nexusflow --help`` never
    needs (about 0.3 s of its start)."""
    from ..transports.errors import cli_not_found

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
        "give the --tools (--mcp-config, --skills-dir) it was started with"
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


def server_not_running(home: Path) -> NexusflowError:
    """``nexusflow server --env`` with no server for the home: exit 1, nothing on stdout."""
    return NexusflowError(f"no nexusflow server runs for {home}; start one with `nexusflow server`")


def usage_answer_other_request(session_id: str, given: str, pending: str) -> UsageError:
    return UsageError(f'session "{session_id}" waits for request {pending}, not {given}: nothing was answered')


def usage_answered_already(session_id: str, request_id: str, flow_run_id: str) -> UsageError:
    return UsageError(
        f'request {request_id} of session "{session_id}" is answered already: it goes on in flow run {flow_run_id}'
    )
