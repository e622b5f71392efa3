"""The ``nexusflow`` command: the answer on stdout, progress on stderr, a non-zero exit
status on failure."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, get_current_settings, temporary_settings

from ._imports import import_tools
from .client import Client, create_cli_client, create_in_process_client
from .errors import NexusflowError, ToolkitError
from .memory import SessionStore
from .messages import Answer, RunResult
from .testing import ScriptedModel, follow_prompt
from .toolkit import Toolkit
from .transports.choice import Transport
from .transports.cli import CliStyles, builtin_style, load_cli_style
from .waits import answer_flow_run

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PENDING = 3


class UsageError(NexusflowError):
    pass


def _tools(specs: Sequence[str]) -> list[Any]:
    try:
        return import_tools(specs)
    except ToolkitError as exc:
        raise UsageError(str(exc).replace("tools:", "--tools:", 1)) from exc


def _script(path: str) -> ScriptedModel:
    try:
        replies = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"--script: cannot read {path}: {exc}") from exc
    if not isinstance(replies, list):
        raise UsageError("--script: the file must hold a JSON list of replies")
    return ScriptedModel(replies)


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


def _cli_options(args: argparse.Namespace) -> dict[str, Any]:
    try:
        transport = Transport(args.transport.lower())
    except ValueError:
        raise UsageError(f"--transport takes auto, acp or cli, not {args.transport!r}") from None
    return {"timeout": args.timeout, "transport": transport, "acp_command": args.acp_command}


def _client(args: argparse.Namespace) -> Client:
    options: dict[str, Any] = {"system_prompt": args.system, "max_turns": args.max_turns}
    if args.style is not None:
        if args.script:
            raise UsageError("--script plays the scripted model; it does not go with --style")
        style = CliStyles.parse(args.style)
        if style is CliStyles.CUSTOM:
            raise UsageError("--style custom has no fields on the command line: describe it in a file, --style-file")
        return create_cli_client(style, args.command, args.model, timeout=args.timeout, **options)
    if args.style_file is not None:
        return create_cli_client(
            load_cli_style(args.style_file), args.command, args.model, timeout=args.timeout, **options
        )
    if args.command or args.model:
        raise UsageError("--command and --model need --style (or --style-file)")
    return create_in_process_client(_script(args.script) if args.script else follow_prompt, **options)


def _data(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--data must be JSON: {exc.msg}") from exc


async def _run(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.answer is None and args.prompt is None:
        raise UsageError("run needs a PROMPT (or --session ID --answer approve|deny to answer a pending run)")
    async with await Toolkit.load(tools=_tools(args.tools), mcp_config=args.mcp, skills_dir=args.skills) as toolkit:
        if args.answer is None:
            result = await client.run(args.prompt, toolkit, session_id=args.session)
        else:
            if args.session is None:
                raise UsageError("--answer needs --session ID: the pending run to answer")
            record = await SessionStore().get(args.session)
            if record is None or record.pending is None:
                raise UsageError(f'session "{args.session}" is not waiting for an answer')
            answer = Answer(
                id=record.pending.id, ok=args.answer == "approve", data=_data(args.data), reason=args.reason
            )
            result = await client.resume(args.session, answer, toolkit)
    return await _finish(result)


async def _answer(args: argparse.Namespace) -> int:
    """Answer a run paused or suspended by ``PrefectPause`` or ``DeploymentSuspension``."""
    try:
        await answer_flow_run(args.flow_run_id, approve=args.approve, data=_data(args.data), reason=args.reason)
    except ValueError as exc:
        raise UsageError(f"not a flow run id: {args.flow_run_id}") from exc
    print(
        f"nexusflow: answered flow run {args.flow_run_id}: {'approved' if args.approve else 'denied'}", file=sys.stderr
    )
    return 0


async def _demo(args: argparse.Namespace) -> int:
    from .demo import PROMPT, TOOLS, demo_model

    print(f"nexusflow demo: {PROMPT}", file=sys.stderr)
    client = create_in_process_client(demo_model())
    async with await Toolkit.load(tools=TOOLS) as toolkit:
        result = await client.run(PROMPT, toolkit, session_id=args.session)
    return await _finish(result)


async def _styles_list(args: argparse.Namespace) -> int:
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


async def _styles_verify(args: argparse.Namespace) -> int:
    from .testing.conformance import verify_acp, verify_one_shot, version_of

    style = CliStyles.parse(args.style)
    if style in (CliStyles.CUSTOM, CliStyles.DEVIN):
        raise UsageError(f"styles verify has no scripted-server recipe for {style.value}")
    chosen = builtin_style(style)
    print(
        f"{style.value}: {args.command} — {version_of(args.command)}"
        f" (style verified with {chosen.verified}{f'; acp {chosen.acp.verified}' if chosen.acp else ''})"
    )
    checks = await verify_one_shot(style, args.command, model=args.model, timeout=args.timeout)
    launch = chosen.acp
    if launch is not None and (not launch.adapter or args.acp_command):
        checks += await verify_acp(
            style, args.command, acp_command=args.acp_command, model=args.model, timeout=args.timeout
        )
    for check in checks:
        timing = f" ({check.seconds:.1f}s)" if check.seconds else ""
        print(f"{'PASS' if check.ok else 'FAIL'}  {check.name}{timing}: {check.detail}")
    return 0 if all(check.ok for check in checks) else EXIT_FAILED


async def _bridge(args: argparse.Namespace) -> int:
    from .transports.acp.bridge import bridge

    await bridge(args.url)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nexusflow", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run an agent on a prompt")
    run.add_argument("prompt", nargs="?")
    run.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="a tool (or a list of tools) to offer; repeatable",
    )
    run.add_argument("--mcp", metavar="MCP_JSON", help="MCP servers, in the mcp.json shape")
    run.add_argument("--skills", metavar="DIR", help="a folder of skills (SKILL.md folders)")
    run.add_argument("--session", metavar="ID", help="session id; the same id resumes a crashed run")
    run.add_argument(
        "--script",
        metavar="FILE",
        help="scripted replies (a JSON list); default: the scripted agent follows"
        " `call NAME {json}` lines in the prompt",
    )
    run.add_argument("--style", metavar="NAME", help=f"drive an agent CLI: {', '.join(s.value for s in CliStyles)}")
    run.add_argument("--style-file", metavar="FILE", help="drive an agent CLI described by your own style file")
    run.add_argument("--command", metavar="PATH", help="the agent CLI's path or name (with --style)")
    run.add_argument("--model", metavar="MODEL", help="model for the agent CLI (with --style)")
    run.add_argument("--transport", default="auto", metavar="auto|acp|cli", help="how to drive the CLI (default auto)")
    run.add_argument("--acp-command", metavar="PATH", help="the ACP adapter of styles that need one (claude, codex)")
    run.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="per CLI launch (default 300)")
    run.add_argument("--system", metavar="TEXT", help="system prompt")
    run.add_argument(
        "--answer", choices=["approve", "deny"], help="answer the pending run of --session, and let it go on"
    )
    run.add_argument("--data", metavar="JSON", help="data handed to the tool with the answer")
    run.add_argument("--reason", metavar="TEXT", help="why, with the answer")
    run.add_argument("--max-turns", type=int, default=20, metavar="N")
    run.set_defaults(handler=_run)

    answer = commands.add_parser("answer", help="answer a paused or suspended run (PrefectPause, DeploymentSuspension)")
    answer.add_argument("flow_run_id")
    verdict = answer.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--approve", action="store_true", dest="approve")
    verdict.add_argument("--deny", action="store_false", dest="approve")
    answer.add_argument("--data", metavar="JSON", help="data handed to the tool with the answer")
    answer.add_argument("--reason", metavar="TEXT")
    answer.set_defaults(handler=_answer)

    styles = commands.add_parser("styles", help="the built-in CLI styles")
    style_commands = styles.add_subparsers(dest="styles_command", required=True)
    listing = style_commands.add_parser("list", help="each style, its transports and the versions it was verified with")
    listing.set_defaults(handler=_styles_list)
    check = style_commands.add_parser(
        "verify", help="check your installed CLI against its style, on a scripted model server (no tokens spent)"
    )
    check.add_argument("--style", required=True, metavar="NAME")
    check.add_argument("--command", required=True, metavar="PATH", help="your CLI")
    check.add_argument("--acp-command", metavar="PATH", help="its ACP adapter (claude, codex), to check ACP too")
    check.add_argument("--model", metavar="MODEL", help="model flag to pass (default: the scripted server's model)")
    check.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS")
    check.set_defaults(handler=_styles_verify)

    bridge = commands.add_parser(
        "mcp-bridge", help="relay MCP over stdio to a served toolkit over HTTP (started by ACP agents)"
    )
    bridge.add_argument("url")
    bridge.set_defaults(handler=_bridge)

    demo = commands.add_parser("demo", help="a multi-step tool-calling run on the scripted model")
    demo.add_argument("--session", metavar="ID", help="session id; the same id replays the run")
    demo.set_defaults(handler=_demo)
    return parser


def _prefect_defaults() -> AbstractContextManager[object]:
    """Prefect's embedded server gets 20 s to start by default, too little on a busy
    two-core machine; the command allows 90 s unless the user chose a value."""
    if "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in os.environ:
        return nullcontext()
    return temporary_settings({PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 90})


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with _prefect_defaults():
            return anyio.run(args.handler, args)
    except UsageError as exc:
        print(f"nexusflow: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NexusflowError as exc:
        print(f"nexusflow: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
