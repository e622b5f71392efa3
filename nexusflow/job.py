"""``agent_job``: an agent run described entirely by parameters, for deployments.

Every parameter is data (``prefect.yaml``, the UI's run form, ``prefect deployment run
-p``), validated at the boundary: a style name must be one of ``CliStyles``. The loop runs
inside the job's own flow run, so its turns and tool calls are the job's task runs and a
suspension suspends the job (the worker's process exits until it is answered).
"""

# No `from __future__ import annotations`: `agent_job.serve()` sends the flow to each run's
# process by value (cloudpickle), with only the globals its code uses; string annotations
# would leave the parameter model unable to resolve `CliStyles` there.

from typing import Any, Literal

from prefect import flow
from prefect.runtime import flow_run

from ._imports import import_output_type, import_tools
from .cli_client import create_cli_client
from .client import Client, create_in_process_client
from .errors import agent_job_failed, agent_job_needs_a_style
from .messages import RunResult
from .output import OutputSpec
from .policies import ToolPolicy
from .testing import ScriptedModel, follow_prompt
from .toolkit import Toolkit
from .transports.choice import Transport
from .transports.oneshot import CliStyles
from .waits import DeploymentSuspension, PrefectPause

Wait = Literal["suspend", "pause", "none"]


def _client(
    style: CliStyles | None,
    command: str | None,
    model: str | None,
    transport: Transport,
    acp_command: str | None,
    script: list[Any] | None,
    options: dict[str, Any],
) -> Client:
    if style is None:
        if command or model:
            raise agent_job_needs_a_style()
        return create_in_process_client(ScriptedModel(script) if script else follow_prompt, **options)
    return create_cli_client(style, command, model, transport=transport, acp_command=acp_command, **options)


def _waits(wait: Wait, timeout: float) -> Any:
    if wait == "suspend":
        return DeploymentSuspension(timeout=timeout)
    if wait == "pause":
        return PrefectPause(timeout=timeout)
    return None


@flow(name="agent-job", validate_parameters=True)
async def agent_job(
    prompt: str,
    style: CliStyles | None = None,
    command: str | None = None,
    model: str | None = None,
    transport: Transport = Transport.AUTO,
    acp_command: str | None = None,
    tools: list[str] | None = None,
    mcp_config: str | None = None,
    skills_dir: str | None = None,
    system_prompt: str | None = None,
    max_turns: int = 20,
    approval: list[str] | None = None,
    wait: Wait = "suspend",
    wait_timeout: float = 86400,
    script: list[Any] | None = None,
    session_id: str | None = None,
    limit: str | None = None,
    max_concurrent: int | None = None,
    per_minute: float | None = None,
    output_type: str | None = None,
) -> RunResult | Any:
    """Run an agent on ``prompt``: your agent CLI (``style``, ``command``, ``model``) or,
    without a style, the bundled scripted agent (``script`` replies, or ``call`` lines in
    the prompt). ``tools`` are ``module:function`` names; ``approval`` names the tools (or
    globs) that need a yes first, asked by ``wait`` (``suspend``: the run waits without a
    process; ``pause``: the process waits; ``none``: the job ends pending). ``limit`` names
    the subscription the model's turns count against, across every worker: at most
    ``max_concurrent`` in flight, ``per_minute`` started per minute. ``output_type``
    (``module:Name``) is what the final answer must be: the job's result is then that
    value as JSON data, not the ``RunResult``."""
    target = import_output_type(output_type)
    options: dict[str, Any] = {
        "system_prompt": system_prompt,
        "max_turns": max_turns,
        "wait_for": _waits(wait, wait_timeout),
        "policies": {pattern: ToolPolicy(approval="always") for pattern in approval or []},
        "limit": limit,
        "max_concurrent": max_concurrent,
        "per_minute": per_minute,
    }
    client = _client(style, command, model, transport, acp_command, script, options)
    session = session_id or f"job-{flow_run.get_id()}"
    async with await Toolkit.load(tools=import_tools(tools or []), mcp_config=mcp_config, skills_dir=skills_dir) as kit:
        result = await client.run(prompt, kit, session_id=session, subflow=False, output_type=target)
    if result.status == "failed":
        raise agent_job_failed(result.error)
    spec = OutputSpec.of(target)
    if spec is None or result.status != "completed":
        return result
    return spec.adapter.dump_python(result.output, mode="json")
