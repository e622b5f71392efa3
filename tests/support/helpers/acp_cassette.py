"""A real ACP agent's session on a cassette: recorded against the scripted model server (one
call of ``add``, then an answer), and the client that replays it with no binary. Shared by the
live test and by the fast-tier replay of the committed ``tests/cassettes/acp-<agent>.json``."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from nexusflow import CliStyles, RunResult, Toolkit, Transport, create_cli_client, tool
from nexusflow.testing import Cassette, ScriptedReply
from nexusflow.testing.conformance import default_model, scripted_cli

PROMPT = "What is 20+22? Use the add tool."
COMMITTED = Path(__file__).parent.parent.parent / "cassettes"

ran: list[tuple[int, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append((a, b))
    return a + b


def committed(style: CliStyles) -> Path:
    return COMMITTED / f"acp-{style.value}.json"


def client(  # type: ignore[no-untyped-def]
    style: CliStyles, cassette: Cassette, cwd: Path, command: str, acp_command: str, env: dict[str, str], **options: Any
):
    return create_cli_client(
        style,
        command,
        default_model(style, acp=True),
        transport=options.pop("transport", Transport.ACP),
        acp_command=acp_command,
        env=env,
        workspace=cwd,
        cwd=cwd,
        timeout=180,
        cassette=cassette,
        **options,
    )


async def record(style: CliStyles, cassette: Cassette, command: str, acp_command: str) -> tuple[RunResult, int]:
    """The live run (the binaries given), recorded; and how many requests reached the server."""
    replies = [ScriptedReply.call("add", {"a": 20, "b": 22}), ScriptedReply.say("It is 42.")]
    async with scripted_cli(style, replies, acp=True) as (server, home, env):
        recorder = client(style, cassette, home, command, acp_command, env)
        async with await Toolkit.load(tools=[add]) as toolkit:
            result = await recorder.run(PROMPT, toolkit, session_id=f"live-{uuid.uuid4().hex}")
        return result, len(server.turns())


async def replay(
    style: CliStyles,
    cassette: Cassette,
    cwd: Path,
    prompt: str = PROMPT,
    tools: list[Any] | None = None,
    session_id: str | None = None,
    **options: Any,
) -> RunResult:
    """The same client with no binary (commands that exist nowhere) and no server; a new
    session unless ``session_id`` names one to run again (it resumes the agent's session)."""
    missing = str(cwd / "no-such-binary")
    replayer = client(style, cassette, cwd, missing, missing, {}, **options)
    async with await Toolkit.load(tools=tools or [add]) as toolkit:
        return await replayer.run(prompt, toolkit, session_id=session_id or f"replay-{uuid.uuid4().hex}")


def transcript(messages) -> list[tuple[str, str | None, list[tuple[str, object]]]]:  # type: ignore[no-untyped-def]
    return [
        (m.role, getattr(m, "content", None), [(c.name, c.arguments) for c in getattr(m, "tool_calls", None) or []])
        for m in messages
    ]
