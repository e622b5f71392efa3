"""Conformance checks of a user's installed agent CLI against its style, on a scripted model
server: what ``nexusflow styles verify`` and the ``styles_canary`` flow run. No token is spent;
the CLI's own logins and settings are not touched (it runs with a temporary home). The checks
leave no session behind (each run's session is forgotten once read), and the deliberate
model error is asked of the CLI directly, not through a run: a failed run would log a
traceback and count as a failed run for every alert on them while all checks pass."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from ..cli_client import create_cli_client
from ..errors import NexusflowError
from ..messages import ModelRequest, RunResult, UserMessage
from ..ops.sessions import forget_session
from ..toolkit import Toolkit, tool
from ..transports.choice import Transport
from ..transports.oneshot.reports import TOKENLESS
from ..transports.oneshot.style import CliStyle, CliStyles, builtin_style
from .server import Recorded, ScriptedModelServer, ScriptedReply, tool_names

EXACT_TEXT = '-leading dash, "quotes", new\nlines, <>&, café 中文 🙂'
"""A final answer that must come back byte for byte through the envelope."""

SERVER_MODEL = "scripted-model"

PROMPT = "Add 2 and 3 with the add tool."


def default_model(style: CliStyles, acp: bool = False) -> str | None:
    """What model to ask for so that the model reaching the server is ``scripted-model``
    (over ACP, claude's adapter takes only its aliases)."""
    if style is CliStyles.GOOSE:
        return None
    if style is CliStyles.OPENCODE:
        return f"scripted/{SERVER_MODEL}"
    if style is CliStyles.CLAUDE and acp:
        return "sonnet"
    return SERVER_MODEL


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float = 0.0

    def line(self) -> str:
        """``PASS  name (time): detail``, as ``styles verify`` prints it."""
        timing = f" ({self.seconds:.1f}s)" if self.seconds else ""
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name}{timing}: {self.detail}"


@dataclass
class Added:
    calls: list[tuple[int, int]]


def _adder(log: Added):  # type: ignore[no-untyped-def]
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        log.calls.append((a, b))
        return a + b

    return add


def version_of(command: str) -> str:
    """What ``command --version`` says, run in a temporary folder of its own (opencode makes
    one in the system's at every start), as the transports run the CLI."""
    try:
        with tempfile.TemporaryDirectory(prefix="nexusflow-version-") as scratch:
            done = subprocess.run(
                [command, "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "TMPDIR": scratch},
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({type(exc).__name__}: {exc})"
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return lines[0] if lines else f"unknown (exit {done.returncode}, no output)"


@asynccontextmanager
async def scripted_cli(
    style: CliStyles, replies: list[ScriptedReply | str], *, acp: bool = False
) -> AsyncIterator[tuple[ScriptedModelServer, Path, dict[str, str]]]:
    """A scripted server, a temporary home and the environment pointing the CLI at both."""
    home = Path(tempfile.mkdtemp(prefix=f"nexusflow-{style.value}-"))
    try:
        async with ScriptedModelServer(replies, model=SERVER_MODEL) as server:
            yield server, home, server.environment(style, home, acp=acp)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _turn_models(turns: list[Recorded]) -> set[str]:
    models = set()
    for request in turns:
        body = request.body if isinstance(request.body, dict) else {}
        model = body.get("model")
        if request.api == "gemini":
            model = request.path.split("/models/")[1].split(":")[0] if "/models/" in request.path else None
        models.add(str(model))
    return models


@asynccontextmanager
async def _throwaway_session() -> AsyncIterator[str]:
    """A session for one check's run, forgotten once the check has its result: the checks
    leave nothing in ``nexusflow sessions`` (nor in an alert counting failed sessions)."""
    session_id = f"verify-{uuid.uuid4().hex}"
    try:
        yield session_id
    finally:
        with suppress(NexusflowError):  # a storage that refuses is not the CLI's failure
            await forget_session(session_id)


async def _run(
    style: CliStyles, command: str, replies: list[ScriptedReply | str], log: Added, *, model: str | None, timeout: float
) -> tuple[RunResult, list[Recorded]]:
    async with scripted_cli(style, replies) as (server, home, env), _throwaway_session() as session_id:
        client = create_cli_client(
            style, command, model, transport=Transport.CLI, env=env, cwd=home, timeout=timeout, repair_budget=0
        )
        async with await Toolkit.load(tools=[_adder(log)]) as toolkit:
            result = await client.run(PROMPT, toolkit, session_id=session_id)
        return result, server.turns()


ERROR_CHECK = "a model error fails the turn, with the model's message"


async def _error_check(style: CliStyles, command: str, *, model: str | None, timeout: float) -> Check:
    """One turn asked of the CLI directly (no flow run) while the server answers HTTP 400:
    the turn must fail with the server's words."""
    errors: list[ScriptedReply | str] = [ScriptedReply.fail(400, "scripted failure: bad request")] * 4  # CLIs retry
    async with scripted_cli(style, errors) as (_, home, env):
        client = create_cli_client(
            style, command, model, transport=Transport.CLI, env=env, cwd=home, timeout=timeout, repair_budget=0
        )
        request = ModelRequest(messages=[UserMessage(content=PROMPT)], tools=Toolkit([_adder(Added([]))]).specs())
        try:
            async with client.transport() as transport:
                reply = await transport.generate(request)
        except NexusflowError as exc:
            return Check(ERROR_CHECK, "scripted failure" in str(exc), f"failed: {exc}")
    return Check(ERROR_CHECK, False, f"the turn answered: {reply.content!r}")


async def verify_one_shot(
    style: CliStyles, command: str, *, model: str | None = None, timeout: float = 180
) -> list[Check]:
    chosen: CliStyle = builtin_style(style)
    model = model if model is not None else default_model(style)
    checks: list[Check] = []
    log = Added(calls=[])
    call = json.dumps({"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}]})
    answer = json.dumps({"content": EXACT_TEXT}, ensure_ascii=False)
    started = time.perf_counter()
    result, turns = await _run(style, command, [call, answer], log, model=model, timeout=timeout)
    seconds = time.perf_counter() - started
    ok = result.status == "completed" and log.calls == [(2, 3)] and result.text == EXACT_TEXT
    detail = (
        "tool ran with a=2, b=3; final text exact"
        if ok
        else (f"status {result.status}, tool calls {log.calls}, text {result.text!r}, error {result.error!r}")
    )
    checks.append(Check("one-shot tool call round trip", ok, detail, seconds))
    checks.append(_usage_check(chosen, result))
    if turns:
        models = _turn_models(turns)
        checks.append(Check("model reaches the server", models == {SERVER_MODEL}, f"server saw {sorted(models)}"))
        offered = sorted({name for t in turns for name in tool_names(t.api, t.body) if t.api})  # type: ignore[arg-type]
        extra = [name for name in offered if name not in chosen.tools_left]
        checks.append(
            Check(
                "own tools off",
                not extra,
                f"the model was offered {extra}"
                if extra
                else f"offered only {offered or 'none'} (allowed: {chosen.tools_left})",
            )
        )
    checks.append(await _error_check(style, command, model=model, timeout=timeout))
    return checks


def _usage_check(style: CliStyle, result: RunResult) -> Check:
    """The usage the CLI printed reached the run's metrics; a CLI that prints none leaves
    it unknown. The scripted server reports 10 tokens in and 5 out for each request."""
    usage = result.metrics.usage
    said = f"{usage.shown()}, models {result.metrics.models or '?'}"
    if style.report is None or style.report in TOKENLESS:
        return Check("usage read", not usage.reported, f"the CLI reports no tokens: {said}")
    turns = result.metrics.turns
    ok = (usage.input_tokens or 0) >= 10 * turns and (usage.output_tokens or 0) >= 5 * turns and turns > 0
    return Check("usage read", ok, said)


async def verify_acp(
    style: CliStyles, command: str, *, acp_command: str | None = None, model: str | None = None, timeout: float = 180
) -> list[Check]:
    log = Added(calls=[])
    model = model if model is not None else default_model(style, acp=True)
    replies: list[ScriptedReply | str] = [
        ScriptedReply.call("add", {"a": 2, "b": 3}),
        ScriptedReply.say("The sum is 5."),
    ]
    started = time.perf_counter()
    async with scripted_cli(style, replies, acp=True) as (server, home, env):
        client = create_cli_client(
            style,
            command,
            model,
            transport=Transport.ACP,
            acp_command=acp_command,
            env=env,
            workspace=home,
            cwd=home,
            timeout=timeout,
        )
        async with await Toolkit.load(tools=[_adder(log)]) as toolkit, _throwaway_session() as session_id:
            result = await client.run(PROMPT, toolkit, session_id=session_id)
        turns = server.turns()
    seconds = time.perf_counter() - started
    reached = any("5" in json.dumps(t.body) for t in turns[1:])
    ok = result.status == "completed" and log.calls == [(2, 3)] and reached
    detail = (
        "served tool ran with a=2, b=3; its result reached the model"
        if ok
        else (f"status {result.status}, tool calls {log.calls}, error {result.error!r}")
    )
    return [Check("ACP served tool call", ok, detail, seconds)]


async def verify_style(
    style: CliStyles,
    command: str,
    *,
    acp_command: str | None = None,
    model: str | None = None,
    timeout: float = 180,
) -> list[Check]:
    """Every check of ``style`` for ``command``: one-shot, and ACP where the style has an ACP
    launch that needs no adapter or ``acp_command`` names one."""
    checks = await verify_one_shot(style, command, model=model, timeout=timeout)
    launch = builtin_style(style).acp
    if launch is not None and (not launch.adapter or acp_command):
        checks += await verify_acp(style, command, acp_command=acp_command, model=model, timeout=timeout)
    return checks
