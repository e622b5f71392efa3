"""What ``nexusflow mcp``'s tools refuse, each in one line the client reads as the tool's error."""

from __future__ import annotations

from ..errors import RunRequestError, UsageError


def mcp_no_run(given: str) -> RunRequestError:
    return RunRequestError(f"mcp: no run of session or flow run {given!r} is known to this Prefect server")


def mcp_session_or_run() -> RunRequestError:
    return RunRequestError("mcp: give a session_id or a flow_run_id (one of them)")


def mcp_no_agent() -> RunRequestError:
    return RunRequestError(
        "mcp: this server was started without an agent (nexusflow mcp --style ... or --script ...): "
        "name a deployment to start"
    )


def mcp_prompt_needed() -> RunRequestError:
    return RunRequestError("mcp: start_run needs a prompt, or a session_id to go on with")


def mcp_prompt_too_long(size: int, bound: int) -> RunRequestError:
    return RunRequestError(
        f"mcp: the prompt is {size} bytes (UTF-8): a run of this server's agent takes at most {bound}"
    )


def mcp_answer_too_long(size: int, bound: int) -> RunRequestError:
    return RunRequestError(
        f"mcp: the answer's data and reason are {size} bytes (UTF-8): an answer to a run of this server's agent "
        f"takes at most {bound}: nothing was answered"
    )


def mcp_no_deployment(name: str) -> RunRequestError:
    return RunRequestError(f"mcp: no deployment {name!r} (give it as flow-name/deployment-name)")


def mcp_session_running(session_id: str, flow_run_id: str | None, refused: str = "started") -> RunRequestError:
    return RunRequestError(f'mcp: session "{session_id}" is running (flow run {flow_run_id}): nothing was {refused}')


def mcp_session_waiting(session_id: str, request_id: str) -> RunRequestError:
    return RunRequestError(
        f'mcp: session "{session_id}" waits for an answer to request {request_id}: answer it, nothing was started'
    )


def mcp_not_waiting(session_id: str, state: str) -> RunRequestError:
    return RunRequestError(f'mcp: session "{session_id}" is {state}, not waiting for an answer: nothing was answered')


def mcp_other_request(session_id: str, given: str, pending: str) -> RunRequestError:
    return RunRequestError(
        f'mcp: session "{session_id}" waits for request {pending}, not {given}: nothing was answered'
    )


def mcp_answered_already(session_id: str, request_id: str) -> RunRequestError:
    return RunRequestError(
        f'mcp: request {request_id} of session "{session_id}" is answered already: nothing was answered again'
    )


def mcp_from_python(session_id: str) -> RunRequestError:
    return RunRequestError(
        f'mcp: session "{session_id}" was started from Python with its own model, which this server cannot '
        "rebuild: answer it there with client.resume"
    )


def mcp_did_not_start(session_id: str, said: str) -> RunRequestError:
    return RunRequestError(f'mcp: the run of session "{session_id}" did not start: {said}')


def mcp_not_running(session_id: str, state: str) -> RunRequestError:
    return RunRequestError(f'mcp: session "{session_id}" is {state}: there is no run to cancel')


def mcp_cancel_elsewhere(session_id: str, pid: int | None, machine: str | None) -> RunRequestError:
    where = f"process {pid} on {machine}" if pid is not None else "a process this server cannot see"
    return RunRequestError(
        f'mcp: session "{session_id}" runs in {where}, outside a deployment: stop it there (Ctrl-C or SIGTERM)'
    )


def mcp_bad_address(text: str) -> UsageError:
    return UsageError(f"mcp: --http takes PORT, HOST:PORT or [IPv6]:PORT (a port of 0 to 65535), not {text!r}")


def mcp_token_empty() -> UsageError:
    return UsageError("mcp: the bearer token (--token or NEXUSFLOW_MCP_TOKEN) is empty")


def mcp_not_loopback_without_token(host: str) -> UsageError:
    return UsageError(
        f"mcp: serving on {host}, beyond this machine, needs a token you chose (--token or NEXUSFLOW_MCP_TOKEN): "
        "a printed one would sit in a terminal's scrollback"
    )


def mcp_bad_wait(wait: float, bound: float) -> RunRequestError:
    return RunRequestError(f"mcp: get_run waits 0 to {bound:g} seconds, not {wait:g}")


def mcp_no_task(task_id: str) -> RunRequestError:
    return RunRequestError(f"mcp: Failed to retrieve task: no task {task_id!r} is known to this Prefect server")


def mcp_task_gone_on(task_id: str, session_id: str) -> RunRequestError:
    return RunRequestError(
        f'mcp: Failed to retrieve task: task {task_id!r} has expired: session "{session_id}" went on with a later '
        "start_run (read it with get_run)"
    )


def mcp_bad_task_data(request_id: str, said: str) -> RunRequestError:
    return RunRequestError(
        f"mcp: the answer to request {request_id} gives data that is not JSON ({said}): nothing was answered"
    )


def mcp_cancel_waiting(session_id: str, request_id: str) -> RunRequestError:
    return RunRequestError(
        f'mcp: session "{session_id}" is waiting for request {request_id}: there is no run to cancel '
        "(decline the request to end its turn)"
    )


def mcp_too_many_runs(running: int) -> RunRequestError:
    return RunRequestError(
        f"mcp: this server's runs in the background are at their bound, {running} (NEXUSFLOW_MCP_MAX_RUNS): "
        "nothing was started; try again once one has ended or waits"
    )
