"""What each ``nexusflow`` command does. Imported only when a command runs (see the package),
so everything here may import Prefect at once."""

from __future__ import annotations

import json
import math
import shlex
import shutil
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal
from uuid import UUID

import anyio
from cyclopts import Parameter, Token
from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterName,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.client.schemas.sorting import ArtifactSort, FlowRunSort, TaskRunSort
from prefect.exceptions import ObjectNotFound
from prefect.settings import get_current_settings
from pydantic import TypeAdapter

from .._artifact_keys import keys_of
from .._checks import check_session_id
from .._imports import import_output_type, import_tools
from .._runtime import when_held
from .._server import use_server
from ..cli_client import create_cli_client
from ..client import Client, create_in_process_client, new_session_id
from ..errors import (
    CliError,
    OutputError,
    SessionIdError,
    SubscriptionLimitError,
    ToolkitError,
    UsageError,
    usage_answer_with_prompt,
    usage_answer_without_decision,
    usage_answer_without_session,
    usage_budget,
    usage_command_without_style,
    usage_custom_style,
    usage_data_not_json,
    usage_empty_prompt,
    usage_files,
    usage_flow_run_not_waiting,
    usage_max_turns,
    usage_no_flow_run,
    usage_no_prompt,
    usage_no_prompt_stored,
    usage_no_run,
    usage_no_verify_recipe,
    usage_not_installed,
    usage_output_type,
    usage_script_not_a_list,
    usage_script_unreadable,
    usage_script_with_style,
    usage_session,
    usage_session_from_python,
    usage_session_not_waiting,
    usage_timeout,
    usage_tool_missing,
    usage_tools,
)
from ..flows.agent import AWAITING
from ..memory import SessionStore, read_inputs
from ..messages import Answer, RunResult
from ..output import OutputSpec
from ..sessions import Forgotten, SessionInfo, duration, forget_session, list_sessions, prune_sessions
from ..testing import ScriptedModel, follow_prompt
from ..testing.export import export_cassette
from ..toolkit import Toolkit
from ..toolkit.mcp import load_mcp_config
from ..toolkit.skills import load_skills
from ..transports.choice import Transport
from ..transports.oneshot import CliStyles, builtin_style, load_cli_style
from ..waits import answer_flow_run
from . import EXIT_FAILED, EXIT_PENDING
from .invocation import Invocation, absolute, absolute_command, absolute_tool, load_invocation, save_invocation


def _style(_: type, tokens: Sequence[Token]) -> CliStyles:
    """Any case names a style; an unknown name is refused with the pinned message and the list."""
    try:
        return CliStyles.parse(tokens[0].value)
    except CliError as exc:
        raise ValueError(str(exc)) from None


Style = Annotated[CliStyles, Parameter(converter=_style)]


def command_name() -> str:
    """This command as a user can type it again: ``nexusflow`` when PATH finds this very
    script, else the script's full path (a virtual environment that is not activated),
    else ``python -m nexusflow``."""
    script = Path(sys.executable).with_name("nexusflow")
    if not script.exists():
        return f"{shlex.quote(sys.executable)} -m nexusflow"
    found = shutil.which("nexusflow")
    if found is not None and Path(found).resolve() == script.resolve():
        return "nexusflow"
    return shlex.quote(str(script))


def _session_id(text: str) -> str:
    try:
        return check_session_id(text)
    except SessionIdError as exc:
        raise usage_session(exc) from None


def _tools(specs: Sequence[str]) -> list[Any]:
    try:
        return import_tools(specs)
    except ToolkitError as exc:
        raise usage_tools(exc) from exc


def _check_files(mcp: str | None, skills: str | None) -> None:
    """An ``mcp.json`` that cannot be read or is not valid, a skills folder that is not one:
    usage errors, found before anything starts (a server that fails to start is not)."""
    try:
        if mcp is not None:
            load_mcp_config(mcp)
        if skills is not None:
            load_skills(skills)
    except ToolkitError as exc:
        raise usage_files(exc) from exc


def _output_type(spec: str | None) -> Any:
    """The type ``--output-type`` names, refused in one line when pydantic cannot use it."""
    try:
        target = import_output_type(spec)
        OutputSpec.of(target)
    except OutputError as exc:
        raise usage_output_type(exc) from exc
    return target


def _script(path: Path) -> ScriptedModel:
    try:
        replies = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise usage_script_unreadable(path, exc) from exc
    if not isinstance(replies, list):
        raise usage_script_not_a_list()
    return ScriptedModel(replies)


def _data(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise usage_data_not_json(exc) from exc


def ui_hint(flow_run_id: str | None) -> str:
    if flow_run_id is None:
        return ""
    settings = get_current_settings()
    if settings.ui_url:
        return f"See it in the Prefect UI: {settings.ui_url}/runs/flow-run/{flow_run_id}"
    return (
        f"See it in the Prefect UI: run `{command_name()} server`, then open "
        f"http://{settings.server.api.host}:{settings.server.api.port}/runs/flow-run/{flow_run_id}"
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _report(result: RunResult, output: OutputSpec | None) -> int:
    """A typed run's stdout is its validated output as one line of JSON, for ``jq`` and
    ``json.loads``; the answer as written stays in the transcript (``show``)."""
    if result.status == "completed":
        print((result.text or "") if output is None else output.adapter.dump_json(result.output).decode())
    metrics = result.metrics
    errors = f", {_count(metrics.tool_errors, 'tool error')}" if metrics.tool_errors else ""
    replayed = f"{_count(metrics.replayed_turns, 'turn')} and {_count(metrics.replayed_tool_calls, 'tool call')}"
    print(
        f"nexusflow: {result.status} — {_count(metrics.turns, 'turn')}, {_count(metrics.tool_calls, 'tool call')}"
        f"{errors} ({replayed} replayed), {metrics.usage.shown()}, session {result.session_id}",
        file=sys.stderr,
    )
    if result.error:
        print(f"nexusflow: error: {result.error}", file=sys.stderr)
    if result.request is not None:
        again = f"{command_name()} answer {result.session_id}"
        print(f"nexusflow: waiting for an answer: {result.request.prompt}", file=sys.stderr)
        print(f"nexusflow: approve with: {again} --approve", file=sys.stderr)
        print(f"nexusflow: deny with: {again} --deny", file=sys.stderr)
    if hint := ui_hint(result.flow_run_id):
        print(hint, file=sys.stderr)
    return {"completed": 0, "pending": EXIT_PENDING}.get(result.status, EXIT_FAILED)


async def _await_recording(result: RunResult, timeout: float = 20) -> None:
    """The server records task runs from events a moment after the flow returns; an embedded
    server stopped before that loses them, and the UI would show the last steps running."""
    if result.flow_run_id is None:
        return
    expected = result.metrics.turns + result.metrics.tool_calls
    run_filter = FlowRunFilter(id=FlowRunFilterId(any_=[UUID(result.flow_run_id)]))
    with anyio.move_on_after(timeout):
        async with get_client() as client:
            while True:
                runs = await client.read_task_runs(flow_run_filter=run_filter)
                if sum(run.state is not None and run.state.is_final() for run in runs) >= expected:
                    return
                await anyio.sleep(0.2)


async def _finish(result: RunResult, client: Client) -> int:
    await _await_recording(result)
    return _report(result, OutputSpec.of(client.options.output_type))


def _installed(command: str | None, flag: str) -> None:
    """A missing binary is refused before any server or flow starts (the run would only
    find out at its first turn)."""
    if command is not None and shutil.which(command) is None:
        raise usage_not_installed(flag, command)


def _check_timeout(timeout: float) -> None:
    """A ``--timeout`` is more than 0 and finite (``inf`` or ``nan`` bounds nothing)."""
    if not 0 < timeout < math.inf:
        raise usage_timeout(timeout)


def _client(invocation: Invocation) -> Client:
    """The client an invocation describes; every mistake in it is a usage error, found
    before Prefect starts."""
    if invocation.max_turns is not None and invocation.max_turns < 1:
        raise usage_max_turns(invocation.max_turns)
    for flag, bound in (("--max-cost-usd", invocation.max_cost_usd), ("--max-tokens", invocation.max_tokens)):
        if bound is not None and bound <= 0:
            raise usage_budget(flag, bound)
    if invocation.timeout is not None:
        _check_timeout(invocation.timeout)
    options: dict[str, Any] = {
        "system_prompt": invocation.system,
        "limit": invocation.limit,
        "max_concurrent": invocation.max_concurrent,
        "per_minute": invocation.per_minute,
        "output_type": _output_type(invocation.output_type),
        "max_cost_usd": invocation.max_cost_usd,
        "max_tokens": invocation.max_tokens,
    }
    if invocation.max_turns is not None:
        options["max_turns"] = invocation.max_turns
    style = invocation.style
    if style is None and invocation.style_file is None:
        if invocation.command or invocation.model:
            raise usage_command_without_style()
        script = invocation.script
        try:
            return create_in_process_client(_script(Path(script)) if script else follow_prompt, **options)
        except SubscriptionLimitError as exc:
            raise UsageError(str(exc)) from exc
    if invocation.script is not None:
        raise usage_script_with_style()
    if style is CliStyles.CUSTOM:
        raise usage_custom_style()
    cli_options: dict[str, Any] = {
        "timeout": invocation.timeout,
        "transport": invocation.transport,
        "acp_command": invocation.acp_command,
    }
    try:
        chosen = style if style is not None else load_cli_style(Path(str(invocation.style_file)))
        client = create_cli_client(chosen, invocation.command, invocation.model, **cli_options, **options)
    except (CliError, SubscriptionLimitError) as exc:
        raise UsageError(str(exc)) from exc
    _installed(invocation.command, "--command")
    _installed(invocation.acp_command, "--acp-command")
    return client


async def run(
    prompt: str | None = None,
    /,
    *,
    tools: list[str] | None = None,
    mcp: Path | None = None,
    skills: Path | None = None,
    session: str | None = None,
    script: Path | None = None,
    style: Style | None = None,
    style_file: Path | None = None,
    command: str | None = None,
    model: str | None = None,
    transport: Transport | None = None,
    acp_command: str | None = None,
    timeout: float | None = None,
    system: str | None = None,
    answer: Literal["approve", "deny"] | None = None,
    data: str | None = None,
    reason: str | None = None,
    max_turns: int | None = None,
    max_cost_usd: float | None = None,
    max_tokens: int | None = None,
    limit: str | None = None,
    max_concurrent: int | None = None,
    per_minute: float | None = None,
    output_type: str | None = None,
) -> int:
    """Run an agent on a prompt, or answer a pending run.

    Parameters
    ----------
    prompt
        The prompt (not needed with --answer).
    tools
        A tool, or a list of tools, to offer: module:function or path/to/file.py:name; repeatable.
    mcp
        MCP servers, in the mcp.json shape.
    skills
        A folder of skills (SKILL.md folders).
    session
        Session id; the same id resumes a crashed run.
    script
        Replies (a JSON list) for the bundled scripted agent, the model without --style; without
        --script it follows ``call NAME {json}`` lines in the prompt.
    style
        Drive an agent CLI of this style.
    style_file
        Drive an agent CLI described by your own style file.
    command
        The agent CLI's path or name (with --style or --style-file).
    model
        Model for the agent CLI.
    transport
        How to drive the CLI: ACP when the style declares it and the binary answers (auto, the
        default unless NEXUSFLOW_TRANSPORT says otherwise), or force one.
    acp_command
        The ACP adapter of styles that need one (claude, codex).
    timeout
        Seconds per CLI launch or ACP turn (default: NEXUSFLOW_TIMEOUT, else 300).
    system
        System prompt.
    answer
        Answer the pending run of --session, and let it go on with the flags it was started
        with (flags given here replace them).
    data
        JSON handed to the tool with the answer.
    reason
        Why, with the answer.
    max_turns
        Turns before the run fails without a final answer (default: NEXUSFLOW_MAX_TURNS, else 20).
    max_cost_usd
        Dollars the run and the runs nested in it may spend together, by the costs the CLI
        reports; the run stops before its next turn once they reach it.
    max_tokens
        Tokens (in + out) the run and the runs nested in it may spend together.
    limit
        Name of the subscription the model's turns count against, on every machine of the server.
    max_concurrent
        Turns of --limit in flight at once.
    per_minute
        Turns of --limit started per minute.
    output_type
        What the final answer must be (module:Name or path/to/file.py:Name, a pydantic model or
        any type pydantic validates); stdout is then the validated value as one line of JSON.
    """
    given = {
        "tools": [absolute_tool(spec) for spec in tools] if tools is not None else None,
        "mcp": absolute(mcp),
        "skills": absolute(skills),
        "style": style,
        "style_file": absolute(style_file),
        "command": absolute_command(command),
        "model": model,
        "transport": transport,
        "acp_command": absolute_command(acp_command),
        "system": system,
        "max_turns": max_turns,
        "max_cost_usd": max_cost_usd,
        "max_tokens": max_tokens,
        "timeout": timeout,
        "script": absolute(script),
        "limit": limit,
        "max_concurrent": max_concurrent,
        "per_minute": per_minute,
        "output_type": absolute_tool(output_type) if output_type is not None else None,
    }
    given = {flag: value for flag, value in given.items() if value is not None}
    if answer is not None:
        if prompt is not None:
            raise usage_answer_with_prompt()
        if session is None:
            raise usage_answer_without_session()
        return await _answer_session(_session_id(session), given, answer == "approve", _data(data), reason)
    if prompt is None and session is not None:
        return await _run_again(_session_id(session), given)
    if prompt is None:
        raise usage_no_prompt()
    if not prompt.strip():
        raise usage_empty_prompt()
    invocation = Invocation.model_validate(given)
    client = _client(invocation)
    session_id = _session_id(session) if session is not None else new_session_id()
    kit = _tools(tools or [])  # as typed, for messages; stored absolute
    _check_files(invocation.mcp, invocation.skills)
    use_server()
    if session is not None:
        await _say_if_another_prompt(session_id, prompt)
    return await _run_session(client, invocation, kit, prompt, session_id)


async def _run_session(client: Client, invocation: Invocation, kit: list[Any], prompt: str, session_id: str) -> int:
    """The run; Ctrl-C says how to go on with it. The invocation is stored by the run once it
    holds the session: a start that is refused leaves the live session's as it was."""
    try:
        async with await Toolkit.load(tools=kit, mcp_config=invocation.mcp, skills_dir=invocation.skills) as toolkit:
            with when_held(partial(save_invocation, session_id, invocation)):
                result = await client.run(prompt, toolkit, session_id=session_id)
    except (KeyboardInterrupt, SystemExit, anyio.get_cancelled_exc_class()):  # Ctrl-C, or a tool that raised it
        print(f"nexusflow: interrupted; go on with: {command_name()} run --session {session_id}", file=sys.stderr)
        raise
    return await _finish(result, client)


async def _run_again(session_id: str, given: dict[str, Any]) -> int:
    """``run --session ID`` without a prompt: the session's stored prompt and flags, its
    finished steps replayed."""
    use_server()
    stored = await load_invocation(session_id)
    state = await SessionStore().get(session_id)
    record = await read_inputs(session_id, state.inputs) if state is not None else None
    if stored is None or record is None:
        raise usage_no_prompt_stored(session_id)
    invocation = stored.over(given)
    client = _client(invocation)
    _check_files(invocation.mcp, invocation.skills)
    return await _run_session(client, invocation, _tools(invocation.tools), record.prompt, session_id)


async def _say_if_another_prompt(session_id: str, prompt: str) -> None:
    """A session run again with another prompt starts anew: its steps' keys follow the prompt."""
    state = await SessionStore().get(session_id)
    record = await read_inputs(session_id, state.inputs) if state is not None else None
    if record is not None and record.prompt != prompt:
        print(
            f"nexusflow: session {session_id} ran another prompt before: this run starts it anew"
            " (nothing of the earlier run replays)",
            file=sys.stderr,
        )


async def _answer_session(session: str, given: dict[str, Any], ok: bool, data: Any, reason: str | None) -> int:
    """Go on with a pending session as it was started: on its stored invocation (``nexusflow
    run``), as a new run of its deployment (``agent_job``), or, for a model the command
    cannot rebuild (a Python ``generate``), by saying what to run instead. The answer is for
    the one call the session waits on, and is used once."""
    use_server()
    stored = await load_invocation(session)
    state = await SessionStore().get(session)
    if state is None or state.pending is None:
        raise usage_session_not_waiting(session)
    if stored is None and not MODEL_FLAGS & given.keys():
        deployment = await _deployment_of(state.waiting)
        if deployment is None:
            raise usage_session_from_python(session, state.pending.id, ok)
        return await _answer_job(deployment, session, ok, data, reason)
    invocation = (stored or Invocation()).over(given)
    client = _client(invocation)
    _check_files(invocation.mcp, invocation.skills)
    kit = _tools(invocation.tools)
    async with await Toolkit.load(tools=kit, mcp_config=invocation.mcp, skills_dir=invocation.skills) as toolkit:
        needed = state.pending.tool
        if needed is not None and toolkit.get(needed) is None:
            raise usage_tool_missing(session, needed)
        reply = Answer(id=state.pending.id, ok=ok, data=data, reason=reason)
        result = await client.resume(session, reply, toolkit)
    return await _finish(result, client)


MODEL_FLAGS = {"style", "style_file", "script"}
"""Flags that name the model: with one, an answer may go on with a session the command did not start."""


async def _deployment_of(flow_run_id: str | None) -> FlowRun | None:
    """The waiting flow run, when a deployment ran it (an ``agent_job``)."""
    if flow_run_id is None:
        return None
    async with get_client() as client:
        try:
            run = await client.read_flow_run(UUID(flow_run_id))
        except ObjectNotFound:
            return None
    return run if run.deployment_id is not None else None


async def _answer_job(waiting: FlowRun, session: str, ok: bool, data: Any, reason: str | None) -> int:
    """A new run of the job's deployment, with the job's parameters, its session and the answer."""
    parameters = {
        **waiting.parameters,
        "session_id": session,
        "answer": "approve" if ok else "deny",
        "answer_data": data,
        "answer_reason": reason,
    }
    async with get_client() as client:
        assert waiting.deployment_id is not None
        started = await client.create_flow_run_from_deployment(waiting.deployment_id, parameters=parameters)
    verdict = "approved" if ok else "denied"
    print(
        f"nexusflow: answered session {session} ({verdict}): it goes on in flow run {started.id} of its deployment",
        file=sys.stderr,
    )
    return 0


async def answer(
    waiting: str,
    /,
    *,
    approve: Annotated[bool | None, Parameter(negative="--deny")] = None,
    data: str | None = None,
    reason: str | None = None,
) -> int:
    """Answer a run that waits, by its session id or its flow run id.

    A run that ended pending (started by nexusflow run, by agent_job, or from Python) goes on
    as it was started; a paused or suspended run (PrefectPause, DeploymentSuspension) is
    resumed by Prefect.

    Parameters
    ----------
    waiting
        The session id, or the id of the waiting flow run.
    approve
        Approve (--approve) or deny (--deny) the request; one of them is required.
    data
        JSON handed to the tool with the answer.
    reason
        Why, with the answer.
    """
    if approve is None:
        raise usage_answer_without_decision()
    payload = _data(data)
    use_server()
    session, paused = await _waiting_for(waiting)
    if paused is not None:
        await answer_flow_run(paused, approve=approve, data=payload, reason=reason)
        print(f"nexusflow: answered flow run {paused}: {'approved' if approve else 'denied'}", file=sys.stderr)
        return 0
    return await _answer_session(session, {}, approve, payload, reason)


async def _waiting_for(waiting: str) -> tuple[str, str | None]:
    """(the session, None) for a run that ended pending; (its session, the flow run) for one
    that Prefect pauses or suspends."""
    try:
        run_id: UUID | None = UUID(waiting)
    except ValueError:
        run_id = None
    async with get_client() as client:
        if run_id is not None:
            try:
                run = await client.read_flow_run(run_id)
            except ObjectNotFound:
                raise usage_no_flow_run(waiting) from None
            state, session = run.state, str(run.parameters.get("session_id") or "")
            if state is not None and state.is_paused():
                if state.name == AWAITING and session:
                    return session, None
                return session, waiting
            raise usage_flow_run_not_waiting(waiting, state.name if state else None)
        session = _session_id(waiting)
        stored = await SessionStore().get(session)
        if stored is not None and stored.pending is not None:
            return session, None
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[f"agent-{session}"]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED])),
            ),
            sort=FlowRunSort.START_TIME_DESC,
            limit=1,
        )
        if runs:
            return session, str(runs[0].id)
    raise usage_session_not_waiting(session)


async def demo(*, session: str | None = None) -> int:
    """A multi-step tool-calling run on the scripted model.

    Parameters
    ----------
    session
        Session id; the same id replays the run.
    """
    from ..demo import PROMPT, TOOLS, demo_model

    print(f"nexusflow demo: {PROMPT}", file=sys.stderr)
    client = create_in_process_client(demo_model())
    session_id = _session_id(session) if session is not None else None
    use_server()
    async with await Toolkit.load(tools=TOOLS) as toolkit:
        result = await client.run(PROMPT, toolkit, session_id=session_id)
    return await _finish(result, client)


async def _transcript(client: PrefectClient, session: str, runs: list[FlowRun]) -> str | None:
    """The session's latest transcript, from its own flow runs: never another session's
    whose id folds to the same artifact key (``Mix_N``, ``mix-n``)."""
    found = await client.read_artifacts(
        artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys_of(session, ("transcript",)))),
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id for run in runs])),
        sort=ArtifactSort.CREATED_DESC,
        limit=1,
    )
    return str(found[0].data) if found else None


async def _runs_of(client: PrefectClient, run_id: str) -> list[FlowRun]:
    """The flow run with this id, else the runs of the session with this id, oldest first."""
    try:
        return [await client.read_flow_run(UUID(run_id))]
    except (ValueError, ObjectNotFound):
        pass
    name = FlowRunFilter(name=FlowRunFilterName(any_=[f"agent-{run_id}"]))
    return await client.read_flow_runs(flow_run_filter=name, sort=FlowRunSort.START_TIME_ASC)


async def show(run_id: str, /) -> int:
    """A past run's transcript and the steps of each of its flow runs.

    Parameters
    ----------
    run_id
        A session id, or a flow run id.
    """
    use_server()
    async with get_client() as client:
        runs = await _runs_of(client, run_id)
        if not runs:
            raise usage_no_run(run_id)
        session = runs[-1].parameters.get("session_id") or f"job-{runs[-1].id}"
        transcript = await _transcript(client, str(session), runs)
        print(transcript if transcript is not None else f"(no transcript for session {session})")
        for flow_run in runs:
            print(f"\nflow run {flow_run.name} ({flow_run.id}): {flow_run.state_name}")
            steps = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id]))
            for task_run in await client.read_task_runs(
                flow_run_filter=steps, sort=TaskRunSort.EXPECTED_START_TIME_ASC
            ):
                seconds = task_run.total_run_time.total_seconds()
                print(f"  {task_run.name:<40} {task_run.state_name or '':<16} {seconds:8.2f}s")
    return 0


async def sessions(
    *,
    state: Annotated[list[str] | None, Parameter(consume_multiple=True)] = None,
    older_than: str | None = None,
    as_json: Annotated[bool, Parameter(name="--json")] = False,
) -> int:
    """The sessions in the result storage, the most recently active first.

    Parameters
    ----------
    state
        Only sessions in these states: running, waiting, completed, failed, crashed
        (comma-separated or repeated).
    older_than
        Only sessions idle for longer than this: 7d, 12h, 30m, 90s.
    as_json
        One JSON list on stdout: session_id, state, flow_run_id, updated (ISO 8601), turns,
        tool_calls, waits_for, tool, error, cost_usd and tokens (null where nothing reported them).
    """
    idle = duration(older_than) if older_than is not None else None
    use_server()
    found = await list_sessions(state=state or (), older_than=idle)
    if as_json:
        print(_SESSIONS.dump_json(found).decode())
        return 0
    print(
        f"{'session':<40} {'state':<10} {'updated':<20} {'turns':>5} {'cost':>10}  {'flow run':<36}  waits for / error"
    )
    for info in found:
        said = info.waits_for or info.error or ""
        updated = info.updated.astimezone().strftime("%Y-%m-%d %H:%M:%S")
        cost = f"${info.cost_usd:.4g}" if info.cost_usd is not None else "?"
        print(
            f"{info.session_id:<40} {info.state:<10} {updated:<20} {info.turns:>5} {cost:>10}"
            f"  {info.flow_run_id or '':<36}  {said[:80]}"
        )
    return 0


async def forget(session_ids: list[str], /) -> int:
    """Delete sessions: their records (steps, inputs, what they wait for, the invocation),
    their conversation, a crashed run's left-over lock, and the sessions nested in them.

    Parameters
    ----------
    session_ids
        The sessions to forget; one that runs is refused.
    """
    use_server()
    for session_id in session_ids:
        _report_forgotten(await forget_session(_session_id(session_id)), session_id)
    return 0


async def prune(*, older_than: str, state: Annotated[list[str] | None, Parameter(consume_multiple=True)] = None) -> int:
    """Forget every session idle for longer than a duration.

    Parameters
    ----------
    older_than
        How long a session has been idle: 7d, 12h, 30m, 90s, 0s.
    state
        The states to prune (default: completed, failed, crashed; a waiting session stays
        unless named; a running one is never pruned).
    """
    idle = duration(older_than)
    use_server()
    pruned = await prune_sessions(older_than=idle, state=state or ())
    for forgotten in pruned:
        _report_forgotten([forgotten], forgotten.session_id)
    print(f"nexusflow: pruned {_count(len(pruned), 'session')}", file=sys.stderr)
    return 0


async def export(session_id: str, /, *, cassette: Path, style: str | None = None) -> int:
    """Write a cassette from a session's recorded steps (no live run, no CLI needed), so a
    run that went wrong is replayed in a test, offline, the same way.

    Parameters
    ----------
    session_id
        The session to export: completed, failed, waiting or crashed, not running.
    cassette
        The cassette file to write (JSON); replay it with ``Cassette(FILE)`` on a CLI client.
    style
        An ACP session's client style, when it is not a built-in one.
    """
    chosen = _session_id(session_id)
    use_server()
    written = await export_cassette(chosen, cassette, style=style)
    prompts = [
        e for s in written.acp for e in s.events if e.client is not None and e.client.get("method") == "session/prompt"
    ]
    turns = _count(len(written.launches) + len(prompts), "turn")
    acp = f" (an ACP session of style {written.acp[0].style})" if written.acp else ""
    print(f"nexusflow: wrote {turns} of session {chosen} to {cassette}{acp}", file=sys.stderr)
    return 0


def _report_forgotten(forgotten: list[Forgotten], asked: str) -> None:
    if not forgotten:
        print(f"nexusflow: nothing of session {asked} was found", file=sys.stderr)
    for one in forgotten:
        also = [what for what, removed in (("its conversation", one.conversation), ("its lock", one.lock)) if removed]
        also += [_count(one.artifacts, "artifact")] if one.artifacts else []
        print(f"forgot {one.session_id}: {_count(one.records, 'record')}{''.join(', ' + a for a in also)}")


_SESSIONS = TypeAdapter(list[SessionInfo])


def styles_list() -> int:
    """Each style, its transports and verified versions."""
    print(f"{'style':<10} {'transports':<20} verified")
    for member in CliStyles:
        if member is CliStyles.CUSTOM:
            continue
        style = builtin_style(member)
        acp = style.acp
        transports = "cli" + (", acp (adapter)" if acp and acp.adapter else ", acp" if acp else "")
        verified = f"cli {style.verified}" + (f"; acp {acp.verified}" if acp else "")
        print(f"{member.value:<10} {transports:<20} {verified}")
    return 0


async def styles_verify(
    *,
    style: Style,
    command: str,
    acp_command: str | None = None,
    model: str | None = None,
    timeout: float = 180.0,
) -> int:
    """Check your installed CLI against its style, on a scripted model server (no tokens spent).

    Your logins and settings stay untouched; the exit status is 1 when any check fails.

    Parameters
    ----------
    style
        The style to check.
    command
        Your CLI's path or name.
    acp_command
        Its ACP adapter (claude, codex), to check ACP too.
    model
        Model flag to pass (default: the scripted server's model).
    timeout
        Seconds per launch.
    """
    from ..testing.conformance import verify_style, version_of

    if style in (CliStyles.CUSTOM, CliStyles.DEVIN):
        raise usage_no_verify_recipe(style.value)
    _check_timeout(timeout)
    chosen = builtin_style(style)
    print(
        f"{style.value}: {command} — {version_of(command)}"
        f" (style verified with {chosen.verified}{f'; acp {chosen.acp.verified}' if chosen.acp else ''})"
    )
    use_server()
    checks = await verify_style(style, command, acp_command=acp_command, model=model, timeout=timeout)
    for check in checks:
        print(check.line())
    return 0 if all(check.ok for check in checks) else EXIT_FAILED
