"""``nexusflow mcp`` through a real MCP client (the ``mcp`` SDK's), over stdio and over HTTP:
a run started, watched to its request, answered once, read to its end; a server restarted in
between; a cancel; and the HTTP server's refusals (token, Host, Origin, size, read-only)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from approvals import LOGGED_DEPLOY

pytestmark = [pytest.mark.anyio]

TOOLS = (
    LOGGED_DEPLOY
    + '''
import os, time

@tool
def wait_long(seconds: float) -> str:
    """Sleeps."""
    with open(os.environ["DEPLOYED_LOG"], "a") as log:
        log.write(f"waiting {os.getpid()}\\n")
    time.sleep(seconds)
    return "slept"
'''
)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "front_tools.py"
    path.write_text(TOOLS)
    monkeypatch.setenv("DEPLOYED_LOG", str(tmp_path / "deployed.log"))
    return path


@asynccontextmanager
async def served(*args: str, **settings: str) -> AsyncIterator[Client]:
    # A loaded machine (CI's) can take longer than the default 30 s to start a run's process.
    env = {**os.environ, "NEXUSFLOW_MCP_START_WAIT": "300", **settings}
    params = StdioServerParameters(command=sys.executable, args=["-m", "nexusflow", "mcp", *args], env=env)
    async with Client(stdio_client(params), read_timeout_seconds=300) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    (said,) = result.content
    return said.text  # type: ignore[union-attr]


async def until(client: Client, session: str, *states: str, within: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        view = await call(client, "get_run", session_id=session, wait=10)  # returns once it stops running
        if view["state"] in states:
            return view
        assert time.monotonic() < deadline, view
        if view["state"] != "running":
            await anyio.sleep(0.5)


@pytest.mark.slow
async def test_a_run_started_watched_answered_once_and_read_across_a_server_restart(tools: Path, tmp_path: Path):
    """The session id is the server's own (a UUID's hex, as ``nexusflow run`` makes them):
    ``nexusflow answer`` took such an id for a flow run's and refused it."""
    async with served("--tools", f"{tools}:deploy") as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert listed == {"start_run", "get_run", "list_sessions", "answer", "cancel_run"}
        started = await call(client, "start_run", prompt='call deploy {"service": "web"}')
    session = started["session_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", session)
    assert started["flow_run_id"] is not None
    async with served("--tools", f"{tools}:deploy") as client:  # a new server: it knows only Prefect and storage
        view = await until(client, session, "waiting")
        assert view["flow_run_id"] == started["flow_run_id"]
        assert view["waiting"]["tool"] == "deploy"
        assert json.loads(view["waiting"]["arguments"]) == {"service": "web"}
        request = view["waiting"]["request_id"]
        said = await refused(client, "answer", session_id=session, request_id="another", approve=True)
        assert said.endswith(f'session "{session}" waits for request {request}, not another: nothing was answered')
        async with served("--tools", f"{tools}:deploy") as other:  # two answers at once, from two servers
            results: list[Any] = []

            async def answer(by: Client, approve: bool) -> None:
                results.append(
                    await by.call_tool("answer", {"session_id": session, "request_id": request, "approve": approve})
                )

            async with anyio.create_task_group() as group:
                group.start_soon(answer, client, True)
                group.start_soon(answer, other, True)
        taken = [result.structured_content for result in results if not result.is_error]
        assert len(taken) == 1, [result.content for result in results]
        assert taken[0]["flow_run_id"] not in (None, started["flow_run_id"])
        (lost,) = [result.content[0].text for result in results if result.is_error]
        assert lost.endswith(
            (
                f'request {request} of session "{session}" is answered already: nothing was answered again',
                f'session "{session}" is running (flow run {taken[0]["flow_run_id"]}): nothing was answered',
            )
        ), lost
        done = await until(client, session, "completed", "failed")
        assert done["state"] == "completed", done
        assert done["text"] == "deploy: deployed web"
        assert (done["turns"], done["tool_calls"]) == (2, 1)
        late = await refused(client, "answer", session_id=session, request_id=request, approve=True)
        assert late.endswith(f'session "{session}" is completed, not waiting for an answer: nothing was answered')
        transcript = await client.read_resource(f"nexusflow://sessions/{session}/transcript")
        assert "deployed web" in transcript.contents[0].text  # type: ignore[union-attr]
        sessions = await call(client, "list_sessions", state=["completed"])
        assert session in [row["session_id"] for row in sessions["result"]]
    assert (tmp_path / "deployed.log").read_text() == "web\n", "the approved tool ran once"


@pytest.mark.slow
async def test_a_running_run_is_cancelled_and_leaves_no_process(tools: Path, tmp_path: Path):
    log = tmp_path / "deployed.log"
    async with served("--tools", f"{tools}:wait_long") as client:
        started = await call(client, "start_run", prompt='call wait_long {"seconds": 600}')
        session = started["session_id"]
        deadline = time.monotonic() + 120
        while not log.exists():
            assert time.monotonic() < deadline, "the tool never started"
            await anyio.sleep(0.2)
        worker = int(log.read_text().split()[1])
        cancelling = await call(client, "cancel_run", session_id=session)
        assert cancelling["how"].startswith("SIGTERM to its process")
        view = await until(client, session, "cancelled", "failed", "completed", "crashed")
        assert view["state"] == "cancelled", view
        deadline = time.monotonic() + 60
        while _alive(worker):
            assert time.monotonic() < deadline, f"the run's process {worker} is still there"
            await anyio.sleep(0.2)
        said = await refused(client, "cancel_run", session_id=session)
        assert said.endswith(f'session "{session}" is cancelled: there is no run to cancel')


@pytest.mark.slow
async def test_a_server_at_its_bound_of_background_runs_refuses_to_start_another(tools: Path, tmp_path: Path):
    """A client calling ``start_run`` in a loop would start a Python with Prefect for each:
    past ``NEXUSFLOW_MCP_MAX_RUNS`` the call is refused and starts nothing, and once a run has
    ended the next starts."""
    async with served("--tools", f"{tools}:wait_long", NEXUSFLOW_MCP_MAX_RUNS="1") as client:
        first = await call(client, "start_run", prompt='call wait_long {"seconds": 600}')
        said = await refused(client, "start_run", prompt="hello")
        assert said.endswith(
            "mcp: this server's runs in the background are at their bound, 1 (NEXUSFLOW_MCP_MAX_RUNS): nothing was "
            "started; try again once one has ended or waits"
        )
        deadline = time.monotonic() + 120
        while not (tmp_path / "deployed.log").exists():
            assert time.monotonic() < deadline, "the tool never started"
            await anyio.sleep(0.2)
        await call(client, "cancel_run", session_id=first["session_id"])
        assert (await until(client, first["session_id"], "cancelled", "failed", "completed"))["state"] == "cancelled"
        deadline = time.monotonic() + 60
        while True:  # its process exits once its run is cancelled
            again = await client.call_tool("start_run", {"prompt": "hello"})
            if not again.is_error:
                break
            assert time.monotonic() < deadline, again.content
            await anyio.sleep(0.5)
        assert again.structured_content is not None
        done = await until(client, again.structured_content["session_id"], "completed", "failed")
        assert done["state"] == "completed", done


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] not in "ZX"


async def test_refusals_in_one_line(tools: Path):
    async with served() as client:
        said = await refused(client, "start_run", prompt="hello")
        assert said.endswith(
            "mcp: this server was started without an agent (nexusflow mcp --style ... or --script ...): "
            "name a deployment to start"
        )
        said = await refused(client, "get_run", session_id="no-such-session-here")
        assert said.endswith(
            "mcp: no run of session or flow run 'no-such-session-here' is known to this Prefect server"
        )
        said = await refused(client, "get_run")
        assert said.endswith("mcp: give a session_id or a flow_run_id (one of them)")
        said = await refused(client, "get_run", session_id="any", wait=51)
        assert said.endswith("mcp: get_run waits 0 to 50 seconds, not 51")
        said = await refused(client, "start_run", deployment="no-flow/no-deployment", prompt="x")
        assert said.endswith("mcp: no deployment 'no-flow/no-deployment' (give it as flow-name/deployment-name)")
        said = await refused(client, "list_sessions", older_than="a while")
        assert "is not a duration" in said


@pytest.fixture
def http_server(tmp_path: Path) -> Any:
    """``nexusflow mcp --http 0 --read-only`` in a process: its URL and the token it printed."""
    stderr = tmp_path / "mcp.err"
    with open(stderr, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "nexusflow", "mcp", "--http", "0", "--read-only"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"MCP server on (http://\S+/mcp); bearer token: (\S+)", stderr.read_text())):
            assert process.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.1)
        yield found.group(1), found.group(2), stderr
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr.read_text()


def _initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }


async def test_http_refuses_without_the_token_a_foreign_host_or_origin_and_a_large_body(http_server: Any):
    url, token, _ = http_server
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    bearer = {**headers, "Authorization": f"Bearer {token}"}
    port = url.split(":")[2].split("/")[0]
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.post(url, json=_initialize(), headers=headers)).status_code == 401
        wrong = {**headers, "Authorization": f"Bearer {token}x"}
        assert (await http.post(url, json=_initialize(), headers=wrong)).status_code == 401
        foreign = {**bearer, "Host": f"evil.example:{port}"}
        assert (await http.post(url, json=_initialize(), headers=foreign)).status_code == 421
        page = {**bearer, "Origin": "http://evil.example"}
        assert (await http.post(url, json=_initialize(), headers=page)).status_code == 403
        large = json.dumps({**_initialize(), "padding": "x" * (1024 * 1024 + 1)})
        assert (await http.post(url, content=large, headers=bearer)).status_code == 413
        own = {**bearer, "Origin": f"http://127.0.0.1:{port}"}
        assert (await http.post(url, json=_initialize(), headers=own)).status_code == 200


async def test_http_read_only_serves_only_what_changes_nothing(http_server: Any):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    url, token, stderr = http_server
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        assert {tool.name for tool in (await client.list_tools()).tools} == {"get_run", "list_sessions"}
        result = await client.call_tool("start_run", {"prompt": "x"})
        assert result.is_error
        sessions = await call(client, "list_sessions")
        assert isinstance(sessions["result"], list)
    assert "Traceback" not in stderr.read_text()


def _configured(code: str, language: str) -> dict[str, Any]:
    """The one server a client's configuration names (Claude Code, Codex, VS Code shapes)."""
    import tomllib

    read = tomllib.loads(code) if language == "toml" else json.loads(code)
    servers = read.get("mcpServers") or read.get("mcp_servers") or read["servers"]
    (server,) = servers.values()
    return server


@pytest.mark.parametrize("index", range(3))
async def test_each_clients_stdio_configuration_starts_the_server_it_names(index: int):
    from helpers.docs import blocks

    found = [block for block in blocks() if "a client's configuration (" in block.marker]
    assert len(found) == 3
    server = _configured(found[index].code, found[index].language)
    assert server["command"] == "nexusflow" and server.get("type", "stdio") == "stdio"
    command = str(Path(sys.executable).with_name("nexusflow"))
    params = StdioServerParameters(command=command, args=server["args"], env=dict(os.environ))
    async with Client(stdio_client(params), read_timeout_seconds=120) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
    assert listed == {"start_run", "get_run", "list_sessions", "answer", "cancel_run"}


async def test_the_http_configuration_reaches_the_server_with_its_token(http_server: Any):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from helpers.docs import block_marked

    url, token, _ = http_server
    server = _configured(block_marked("a client's configuration over HTTP"), "json")
    port = url.split(":")[2].split("/")[0]
    written = server["url"]
    assert written.startswith("http://127.0.0.1:") and written.endswith("/mcp")
    headers = {name: value.replace("${input:nexusflow-token}", token) for name, value in server["headers"].items()}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(written.replace(":8765/", f":{port}/"), http_client=http)) as client,
    ):
        assert {tool.name for tool in (await client.list_tools()).tools} == {"get_run", "list_sessions"}


@pytest.mark.slow
async def test_two_starts_of_one_session_at_once_run_it_once(tools: Path, tmp_path: Path, session_id: str):
    """Both pass the check that the session is not running; the session's lock lets one run,
    and the other's process is refused: its refusal is the tool's error, in the command's words."""
    async with served("--tools", f"{tools}:wait_long") as first, served("--tools", f"{tools}:wait_long") as second:
        results: list[Any] = []

        async def start(client: Client) -> None:
            # Long enough that the second process meets the first holding the session, however
            # much later a loaded machine starts it (else it replays the finished run: also once).
            arguments = {"prompt": 'call wait_long {"seconds": 20}', "session_id": session_id}
            results.append(await client.call_tool("start_run", arguments))

        async with anyio.create_task_group() as group:
            group.start_soon(start, first)
            group.start_soon(start, second)
        taken = [result for result in results if not result.is_error]
        assert len(taken) == 1, [result.content for result in results]
        (lost,) = [result.content[0].text for result in results if result.is_error]
        assert f'mcp: the run of session "{session_id}" did not start: nexusflow: error: ' in lost, lost
        assert "is already running" in lost, lost
        done = await until(first, session_id, "completed", "failed")
        assert done["state"] == "completed", done
    assert (tmp_path / "deployed.log").read_text().count("waiting") == 1, "the tool ran twice"


async def test_a_prompt_past_the_bound_is_refused_and_starts_nothing(tools: Path, session_id: str):
    async with served("--tools", f"{tools}:deploy") as client:
        said = await refused(client, "start_run", prompt="x" * 120_001, session_id=session_id)
        assert said.endswith(
            "mcp: the prompt is 120001 bytes (UTF-8): a run of this server's agent takes at most 120000"
        )
        said = await refused(client, "get_run", session_id=session_id)
        assert "no run of session or flow run" in said


@pytest.mark.slow
async def test_a_prompt_or_reason_that_begins_with_a_dash_is_text_not_a_flag(tools: Path, tmp_path: Path):
    """The background command gets the prompt after ``--`` and each value after ``=``: a
    prompt of ``--help`` once printed the command's help, and no run started."""
    async with served("--tools", f"{tools}:deploy") as client:
        started = await call(client, "start_run", prompt='--help\ncall deploy {"service": "-x"}')
        session = started["session_id"]
        view = await until(client, session, "waiting")
        request = view["waiting"]["request_id"]
        await call(client, "answer", session_id=session, request_id=request, approve=True, reason="--deny")
        done = await until(client, session, "completed", "failed")
        assert done["state"] == "completed", done
        assert done["text"] == "deploy: deployed -x"
    assert (tmp_path / "deployed.log").read_text() == "-x\n"
