"""What several commands share: how a flag's value is checked, and how a run is reported."""

from __future__ import annotations

import json
import math
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import anyio
from cyclopts import Parameter, Token
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.settings import get_current_settings

from ..client import Client
from ..config._checks import check_session_id
from ..config.output import OutputSpec
from ..errors import CliError, SessionIdError
from ..messages import RunResult
from ..transports.oneshot import CliStyles
from . import EXIT_FAILED, EXIT_PENDING
from .errors import usage_data_not_json, usage_session, usage_timeout


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


def checked_session_id(text: str) -> str:
    try:
        return check_session_id(text)
    except SessionIdError as exc:
        raise usage_session(exc) from None


def answer_json(text: str | None) -> Any:
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


def count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _report(result: RunResult, output: OutputSpec | None) -> int:
    """A typed run's stdout is its validated output as one line of JSON, for ``jq`` and
    ``json.loads``; the answer as written stays in the transcript (``show``)."""
    if result.status == "completed":
        print((result.text or "") if output is None else output.adapter.dump_json(result.output).decode())
    metrics = result.metrics
    errors = f", {count(metrics.tool_errors, 'tool error')}" if metrics.tool_errors else ""
    replayed = f"{count(metrics.replayed_turns, 'turn')} and {count(metrics.replayed_tool_calls, 'tool call')}"
    print(
        f"nexusflow: {result.status} — {count(metrics.turns, 'turn')}, {count(metrics.tool_calls, 'tool call')}"
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


async def finish(result: RunResult, client: Client) -> int:
    await _await_recording(result)
    return _report(result, OutputSpec.of(client.options.output_type))


def check_timeout(timeout: float) -> None:
    """A ``--timeout`` is more than 0 and finite (``inf`` or ``nan`` bounds nothing)."""
    if not 0 < timeout < math.inf:
        raise usage_timeout(timeout)
