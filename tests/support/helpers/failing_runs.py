"""Expected failures met from Python, as a user's script meets them: ``run_sync``,
``client.run``, a user's own flow and ``agent_job``, one after another in this process.

``python failing_runs.py FOLDER``: FOLDER holds a fake CLI folder per case (its
``script.json`` written by the test) and ``not-executable``. Each case prints one JSON line
on stdout: its name, the run's status, error and flow run id (what the caller has); stderr
is the console a user sees. Imported by nothing."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from prefect import flow

from nexusflow import Toolkit, Transport, create_cli_client, create_in_process_client, tool
from nexusflow.job import agent_job
from nexusflow.transports.oneshot import CliStyles

sys.path.insert(0, str(Path(__file__).parent.parent))
from acp_fixtures import ScriptedAgent

FOLDER = Path(sys.argv[1])
FAKE = str(Path(__file__).parent / "fake_cli.py")
SESSION = os.urandom(4).hex()


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def said(case: str, status: str, error: str | None, flow_run_id: str | None, session_id: str | None = None) -> None:
    fields = {"case": case, "status": status, "error": error, "flow_run_id": flow_run_id, "session_id": session_id}
    print(json.dumps(fields), flush=True)


def claude(case: str, command: str = FAKE, **options: object):
    os.environ["FAKE_CLI_DIR"] = str(FOLDER / case)
    return create_cli_client(CliStyles.CLAUDE, command, "sonnet", transport=Transport.CLI, **options)


async def cli_cases() -> None:
    async with await Toolkit.load(tools=[add]) as toolkit:
        for case, command, options in [
            ("quota", FAKE, {}),
            ("timeout", FAKE, {"timeout": 0.5}),
            ("malformed", FAKE, {"repair_budget": 0}),
            ("missing", str(FOLDER / "no-such-claude"), {}),
            ("permission", str(FOLDER / "not-executable"), {}),
        ]:
            result = await claude(case, command, **options).run("hi", toolkit, session_id=f"{case}-{SESSION}")
            said(case, result.status, result.error, result.flow_run_id, result.session_id)


async def acp_case() -> None:
    """An ACP adapter that refuses ``session/new`` for want of a login."""
    agent = ScriptedAgent(FOLDER / "acp")
    client = create_cli_client(agent.style, agent.command, transport=Transport.ACP, env=agent.env)
    result = await client.run("hi", session_id=f"acp-{SESSION}")
    said("acp", result.status, result.error, result.flow_run_id)


async def in_process_cases() -> None:
    costly = create_in_process_client(
        lambda request: {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}], "usage": {"cost_usd": 0.01}},
        max_cost_usd=0.01,
    )
    calls = create_in_process_client(
        lambda request: {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}, max_turns=1
    )
    async with await Toolkit.load(tools=[add]) as toolkit:
        for case, client in [("budget", costly), ("max-turns", calls)]:
            result = await client.run("hi", toolkit, session_id=f"{case}-{SESSION}")
            said(case, result.status, result.error, result.flow_run_id, result.session_id)


async def busy_case() -> None:
    """A second run of a session that runs: refused, in one line."""
    holding, release = asyncio.Event(), asyncio.Event()

    @tool
    async def hold() -> str:
        """Hold the session."""
        holding.set()
        await release.wait()
        return "held"

    def model(request):
        if request.messages[-1].role == "user":
            return {"tool_calls": [{"name": "hold", "arguments": {}}]}
        return "done"

    client = create_in_process_client(model)
    async with await Toolkit.load(tools=[hold]) as toolkit:
        first = asyncio.create_task(client.run("hold it", toolkit, session_id=f"busy-{SESSION}"))
        await holding.wait()
        second = await client.run("hold it", toolkit, session_id=f"busy-{SESSION}")
        release.set()
        held = await first
    said("busy", second.status, second.error, second.flow_run_id)
    assert held.status == "completed", held.error


@flow
async def nightly() -> str | None:
    """A user's own flow: the agent fails, the flow goes on with its result."""
    result = await claude("own-flow").run("hi", session_id=f"own-flow-{SESSION}")
    said("own-flow", result.status, result.error, result.flow_run_id)
    return result.error


async def job_case() -> None:
    os.environ["FAKE_CLI_DIR"] = str(FOLDER / "job")
    state = await agent_job(
        prompt="hi", style="claude", command=FAKE, model="sonnet", transport="cli", return_state=True
    )
    said("job", state.type.value.lower(), state.message, str(state.state_details.flow_run_id))


async def main() -> None:
    await cli_cases()
    await acp_case()
    await in_process_cases()
    await busy_case()
    await nightly()
    await job_case()


if __name__ == "__main__":
    result = claude("run-sync").run_sync("hi", session_id=f"run-sync-{SESSION}")
    said("run-sync", result.status, result.error, result.flow_run_id)
    asyncio.run(main())
