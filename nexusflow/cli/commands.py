"""What each ``nexusflow`` command does. Imported only when a command runs (see the package),
so everything here may import Prefect at once."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated, Any, Literal
from uuid import UUID

import anyio
from cyclopts import Parameter, Token
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, get_current_settings, temporary_settings

from .._imports import import_tools
from ..client import Client, create_cli_client, create_in_process_client
from ..errors import CliError, ToolkitError
from ..memory import SessionStore
from ..messages import Answer, RunResult
from ..testing import ScriptedModel, follow_prompt
from ..toolkit import Toolkit
from ..transports.choice import Transport
from ..transports.cli import CliStyles, builtin_style, load_cli_style
from ..waits import answer_flow_run
from . import EXIT_FAILED, EXIT_PENDING, UsageError


def _style(_: type, tokens: Sequence[Token]) -> CliStyles:
    """Any case names a style; an unknown name is refused with the pinned message and the list."""
    try:
        return CliStyles.parse(tokens[0].value)
    except CliError as exc:
        raise ValueError(str(exc)) from None


Style = Annotated[CliStyles, Parameter(converter=_style)]


def _prefect_defaults() -> AbstractContextManager[object]:
    """Prefect's embedded server gets 20 s to start by default, too little on a busy
    two-core machine; the command allows 90 s unless the user chose a value."""
    if "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in os.environ:
        return nullcontext()
    return temporary_settings({PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 90})


def _tools(specs: Sequence[str]) -> list[Any]:
    try:
        return import_tools(specs)
    except ToolkitError as exc:
        raise UsageError(str(exc).replace("tools:", "--tools:", 1)) from exc


def _script(path: Path) -> ScriptedModel:
    try:
        replies = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"--script: cannot read {path}: {exc}") from exc
    if not isinstance(replies, list):
        raise UsageError("--script: the file must hold a JSON list of replies")
    return ScriptedModel(replies)


def _data(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--data must be JSON: {exc.msg}") from exc


def ui_hint(flow_run_id: str | None) -> str:
    if flow_run_id is None:
        return ""
    ui_url = get_current_settings().ui_url
    if ui_url:
        return f"See it in the Prefect UI: {ui_url}/runs/flow-run/{flow_run_id}"
    return (
        "See it in the Prefect UI: run `prefect server start`, then open "
        f"http://127.0.0.1:4200/runs/flow-run/{flow_run_id}"
    )


def _report(result: RunResult) -> int:
    if result.status == "completed":
        print(result.text or "")
    metrics = result.metrics
    summary = (
        f"nexusflow: {result.status} — {metrics.turns} turns, {metrics.tool_calls} tool calls "
        f"({metrics.replayed_turns} turns and {metrics.replayed_tool_calls} tool calls replayed), "
        f"session {result.session_id}"
    )
    print(summary, file=sys.stderr)
    if result.error:
        print(f"nexusflow: error: {result.error}", file=sys.stderr)
    if result.request is not None:
        print(f"nexusflow: waiting for an answer: {result.request.prompt}", file=sys.stderr)
        print(
            f"nexusflow: answer with: nexusflow run --session {result.session_id} --answer approve|deny [--data JSON]",
            file=sys.stderr,
        )
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


async def _finish(result: RunResult) -> int:
    await _await_recording(result)
    return _report(result)


def _client(
    style: CliStyles | None,
    style_file: Path | None,
    command: str | None,
    model: str | None,
    script: Path | None,
    cli_options: dict[str, Any],
    options: dict[str, Any],
) -> Client:
    if style is not None:
        if script is not None:
            raise UsageError("--script plays the scripted model; it does not go with --style")
        if style is CliStyles.CUSTOM:
            raise UsageError("--style custom has no fields on the command line: describe it in a file, --style-file")
        return create_cli_client(style, command, model, **cli_options, **options)
    if style_file is not None:
        return create_cli_client(load_cli_style(style_file), command, model, **cli_options, **options)
    if command or model:
        raise UsageError("--command and --model need --style (or --style-file)")
    return create_in_process_client(_script(script) if script else follow_prompt, **options)


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
    transport: Transport = Transport.AUTO,
    acp_command: str | None = None,
    timeout: float = 300.0,
    system: str | None = None,
    answer: Literal["approve", "deny"] | None = None,
    data: str | None = None,
    reason: str | None = None,
    max_turns: int = 20,
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
        How to drive the CLI: ACP when the style declares it and the binary answers (auto), or force one.
    acp_command
        The ACP adapter of styles that need one (claude, codex).
    timeout
        Seconds per CLI launch or ACP turn.
    system
        System prompt.
    answer
        Answer the pending run of --session, and let it go on.
    data
        JSON handed to the tool with the answer.
    reason
        Why, with the answer.
    max_turns
        Turns before the run fails without a final answer.
    """
    cli_options = {"timeout": timeout, "transport": transport, "acp_command": acp_command}
    client = _client(
        style, style_file, command, model, script, cli_options, {"system_prompt": system, "max_turns": max_turns}
    )
    if answer is None and prompt is None:
        raise UsageError("run needs a PROMPT (or --session ID --answer approve|deny to answer a pending run)")
    with _prefect_defaults():
        async with await Toolkit.load(tools=_tools(tools or []), mcp_config=mcp, skills_dir=skills) as toolkit:
            if prompt is not None and answer is None:
                result = await client.run(prompt, toolkit, session_id=session)
            else:
                if session is None:
                    raise UsageError("--answer needs --session ID: the pending run to answer")
                record = await SessionStore().get(session)
                if record is None or record.pending is None:
                    raise UsageError(f'session "{session}" is not waiting for an answer')
                reply = Answer(id=record.pending.id, ok=answer == "approve", data=_data(data), reason=reason)
                result = await client.resume(session, reply, toolkit)
        return await _finish(result)


async def answer(
    flow_run_id: str,
    /,
    *,
    approve: Annotated[bool, Parameter(negative="--deny")],
    data: str | None = None,
    reason: str | None = None,
) -> int:
    """Answer a paused or suspended run (PrefectPause, DeploymentSuspension).

    Parameters
    ----------
    flow_run_id
        The waiting flow run.
    approve
        Approve (--approve) or deny (--deny) the request; one of them is required.
    data
        JSON handed to the tool with the answer.
    reason
        Why, with the answer.
    """
    with _prefect_defaults():
        try:
            await answer_flow_run(flow_run_id, approve=approve, data=_data(data), reason=reason)
        except ValueError as exc:
            raise UsageError(f"not a flow run id: {flow_run_id}") from exc
    print(f"nexusflow: answered flow run {flow_run_id}: {'approved' if approve else 'denied'}", file=sys.stderr)
    return 0


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
    with _prefect_defaults():
        async with await Toolkit.load(tools=TOOLS) as toolkit:
            result = await client.run(PROMPT, toolkit, session_id=session)
        return await _finish(result)


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
    from ..testing.conformance import verify_acp, verify_one_shot, version_of

    if style in (CliStyles.CUSTOM, CliStyles.DEVIN):
        raise UsageError(f"styles verify has no scripted-server recipe for {style.value}")
    chosen = builtin_style(style)
    print(
        f"{style.value}: {command} — {version_of(command)}"
        f" (style verified with {chosen.verified}{f'; acp {chosen.acp.verified}' if chosen.acp else ''})"
    )
    with _prefect_defaults():
        checks = await verify_one_shot(style, command, model=model, timeout=timeout)
        launch = chosen.acp
        if launch is not None and (not launch.adapter or acp_command):
            checks += await verify_acp(style, command, acp_command=acp_command, model=model, timeout=timeout)
    for check in checks:
        timing = f" ({check.seconds:.1f}s)" if check.seconds else ""
        print(f"{'PASS' if check.ok else 'FAIL'}  {check.name}{timing}: {check.detail}")
    return 0 if all(check.ok for check in checks) else EXIT_FAILED
