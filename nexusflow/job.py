"""``agent_job``: an agent run described entirely by parameters, for deployments; and
``styles_canary``, ``nexusflow styles verify`` as a flow, scheduled before the jobs that use a CLI.

Every parameter is data (``prefect.yaml``, the UI's run form, ``prefect deployment run
-p``), validated at the boundary: a style name must be one of ``CliStyles``. The loop runs
inside the job's own flow run, so its turns and tool calls are the job's task runs and a
suspension suspends the job (the worker's process exits until it is answered).
"""

# No `from __future__ import annotations`: `agent_job.serve()` sends the flow to each run's
# process by value (cloudpickle), with only the globals its code uses; string annotations
# would leave the parameter model unable to resolve `CliStyles` there.

from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Paused

from ._support.secrets import redact
from .cli_client import create_cli_client
from .client import Client, create_in_process_client
from .config._imports import import_output_type, import_tools
from .config.output import OutputSpec
from .config.policies import ToolPolicy
from .config.settings import Wait, settings
from .config.waits import policy_wait, waiting_is_no_error
from .errors import agent_job_failed, agent_job_needs_a_style, agent_job_not_waiting, style_checks_failed
from .flows.run import AWAITING
from .messages import Answer, RunResult
from .ops.sessions import job_session
from .state.store import SessionStore
from .testing import ScriptedModel, follow_prompt
from .toolkit import Toolkit
from .transports.choice import Transport
from .transports.oneshot import CliStyles


def _client(
    style: CliStyles | None,
    command: str | None,
    model: str | None,
    transport: Transport | None,
    acp_command: str | None,
    script: list[Any] | None,
    options: dict[str, Any],
) -> Client:
    if style is None:
        if command or model:
            raise agent_job_needs_a_style()
        return create_in_process_client(ScriptedModel(script) if script else follow_prompt, **options)
    return create_cli_client(style, command, model, transport=transport, acp_command=acp_command, **options)


@flow(name="agent-job", validate_parameters=True)
async def agent_job(
    prompt: str,
    style: CliStyles | None = None,
    command: str | None = None,
    model: str | None = None,
    transport: Transport | None = None,
    acp_command: str | None = None,
    tools: list[str] | None = None,
    mcp_config: str | None = None,
    skills_dir: str | None = None,
    system_prompt: str | None = None,
    max_turns: int | None = None,
    approval: list[str] | None = None,
    wait: Wait | None = None,
    wait_timeout: float | None = None,
    script: list[Any] | None = None,
    session_id: str | None = None,
    limit: str | None = None,
    max_concurrent: int | None = None,
    per_minute: float | None = None,
    output_type: str | None = None,
    answer: Literal["approve", "deny"] | None = None,
    answer_data: Any = None,
    answer_reason: str | None = None,
) -> RunResult | Any:
    """Run an agent on ``prompt``: your agent CLI (``style``, ``command``, ``model``) or,
    without a style, the bundled scripted agent (``script`` replies, or ``call`` lines in
    the prompt). ``tools`` are ``module:function`` names; ``approval`` names the tools (or
    globs) that need a yes first, asked by ``wait`` (``suspend``, the default: the run waits
    without a process; ``pause``: the process waits; ``none``: the job ends pending) for
    ``wait_timeout`` seconds (a day by default). ``limit`` names the subscription the
    model's turns count against, across every worker: at most ``max_concurrent`` in flight,
    ``per_minute`` started per minute. ``output_type`` (``module:Name``) is what the final
    answer must be: the job's result is then that value as JSON data, not the
    ``RunResult``. ``max_turns``, ``transport``, ``wait`` and ``wait_timeout`` left out take
    their ``NEXUSFLOW_*`` setting, else their default. A job that ended pending (``wait``
    ``none``) is Paused, named ``AwaitingAnswer``; ``answer`` (with ``answer_data`` and
    ``answer_reason``) and its ``session_id`` go on with it: ``nexusflow answer`` starts that
    run of the deployment."""
    target = import_output_type(output_type)
    policy = settings()
    options: dict[str, Any] = {
        "system_prompt": system_prompt,
        "wait_for": policy_wait(wait or policy.wait or "suspend", wait_timeout or policy.wait_timeout),
        "policies": {pattern: ToolPolicy(approval="always") for pattern in approval or []},
        "limit": limit,
        "max_concurrent": max_concurrent,
        "per_minute": per_minute,
    }
    if max_turns is not None:
        options["max_turns"] = max_turns
    client = _client(style, command, model, transport, acp_command, script, options)
    session = session_id or job_session(str(flow_run.get_id()))
    async with await Toolkit.load(tools=import_tools(tools or []), mcp_config=mcp_config, skills_dir=skills_dir) as kit:
        if answer is None:
            result = await client.run(prompt, kit, session_id=session, subflow=False, output_type=target)
        else:
            waiting = await SessionStore().get(session)
            if waiting is None or waiting.pending is None:
                raise agent_job_not_waiting(session)
            given = Answer(id=waiting.pending.id, ok=answer == "approve", data=answer_data, reason=answer_reason)
            result = await client.resume(session, given, kit, subflow=False, output_type=target)
    if result.status == "failed":
        raise agent_job_failed(result.error)
    if result.status == "pending":
        waiting_is_no_error()
        return Paused(name=AWAITING, message=redact(result.request.prompt) if result.request else None, data=result)
    spec = OutputSpec.of(target)
    if spec is None:
        return result
    return spec.adapter.dump_python(result.output, mode="json")


@flow(name="styles-canary", validate_parameters=True)
async def styles_canary(
    style: CliStyles,
    command: str,
    acp_command: str | None = None,
    model: str | None = None,
    timeout: float = 180.0,
) -> list[str]:
    """``nexusflow styles verify`` as a flow: checks the installed CLI (``command``, with its
    ACP adapter ``acp_command``) against ``style`` on a scripted model server, no token spent,
    its logins untouched, and no session left behind. Scheduled before the jobs that use the
    CLI, it tells of a CLI that updated itself out of its style before a job meets it: any
    failed check fails the run with one line naming the CLI, its version and each failed
    check (``StyleCheckFailed``), for an alert on failed runs. Returns the checks' lines.
    Needs the ``testing`` extra (the scripted server)."""
    from .testing.conformance import verify_style, version_of

    version = version_of(command)
    checks = await verify_style(style, command, acp_command=acp_command, model=model, timeout=timeout)
    logger = get_run_logger()
    for check in checks:
        logger.info("%s", check.line())
    failed = [(check.name, check.detail) for check in checks if not check.ok]
    if failed:
        raise style_checks_failed(style.value, command, version, failed)
    return [check.line() for check in checks]
