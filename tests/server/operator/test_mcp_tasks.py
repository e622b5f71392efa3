"""``nexusflow mcp`` with the MCP Tasks extension (SEP-2663, ``io.modelcontextprotocol/tasks``),
through the ``mcp`` SDK's client and a client extension written here against the extension's
schema (no Python client ships one): ``start_run`` as a task, its status across a server
restart, ``input_required`` answered through ``tasks/update``, the result as ``get_run``'s final
view; the refusals the spec asks for; a client that declares nothing gets the plain tool."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import TypeAdapter

from nexusflow.ops.background_logs import logs_folder

from approvals import LOGGED_DEPLOY

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKS = "io.modelcontextprotocol/tasks"
_ANY = TypeAdapter(dict[str, Any])


class CreateTaskResult(Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskIdParams(RequestParams):
    task_id: str


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any]


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param: ClassVar[str | None] = "taskId"


class UpdateTask(Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param: ClassVar[str | None] = "taskId"


class CancelTask(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param: ClassVar[str | None] = "taskId"


async def get_task(client: Client, task_id: str) -> dict[str, Any]:
    return await client.session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), _ANY)


async def update_task(client: Client, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
    params = UpdateParams(task_id=task_id, input_responses=responses)
    return await client.session.send_request(UpdateTask(params=params), _ANY)


async def until_status(client: Client, task_id: str, *statuses: str, within: float = 240) -> dict[str, Any]:
    with anyio.fail_after(within):
        while True:
            task = await get_task(client, task_id)
            assert task["resultType"] == "complete"
            if task["status"] in statuses:
                return task
            await anyio.sleep(task["pollIntervalMs"] / 1000)


class TasksClient(ClientExtension):
    """The client side of the extension: a ``start_run`` answered with a task is polled to its
    end, each request it waits for answered as ``approve`` says, and its result returned."""

    identifier = TASKS

    def __init__(self, approve: bool = True) -> None:
        self.approve = approve
        self.seen: list[str] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve)]

    async def resolve(self, created: CreateTaskResult, context: ClaimContext) -> CallToolResult:
        with anyio.fail_after(240):
            while True:
                params = TaskIdParams(task_id=created.task_id)
                task = await context.session.send_request(GetTask(params=params), _ANY)
                self.seen.append(task["status"])
                if task["status"] == "input_required":
                    answers = {
                        key: {"action": "accept" if self.approve else "decline", "content": {"approve": self.approve}}
                        for key in task["inputRequests"]
                    }
                    await context.session.send_request(
                        UpdateTask(params=UpdateParams(task_id=created.task_id, input_responses=answers)), _ANY
                    )
                elif task["status"] == "completed":
                    return CallToolResult.model_validate(task["result"])
                elif task["status"] in ("cancelled", "failed"):
                    raise AssertionError(task)
                await anyio.sleep(task["pollIntervalMs"] / 1000)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "task_tools.py"
    path.write_text(
        LOGGED_DEPLOY
        + '''
import time

@tool
def wait_long(seconds: float) -> str:
    """Sleeps."""
    time.sleep(seconds)
    return "slept"
'''
    )
    monkeypatch.setenv("DEPLOYED_LOG", str(tmp_path / "deployed.log"))
    return path


@asynccontextmanager
async def served(tools: Path, *extensions: ClientExtension) -> AsyncIterator[Client]:
    env = {**os.environ, "NEXUSFLOW_MCP_START_WAIT": "300"}
    args = ["-m", "nexusflow", "mcp", "--tools", f"{tools}:deploy", "--tools", f"{tools}:wait_long"]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with Client(stdio_client(params), read_timeout_seconds=300, extensions=list(extensions)) as client:
        yield client


async def test_a_task_follows_its_run_across_a_restart_waits_for_input_and_ends_with_get_runs_view(
    tools: Path, tmp_path: Path
):
    async with served(tools, TasksClient()) as client:
        assert client.protocol_version == "2026-07-28"
        created = await client.session.call_tool(
            "start_run", {"prompt": 'call deploy {"service": "web"}'}, allow_claimed=True
        )
    assert isinstance(created, CreateTaskResult), created
    assert (created.status, created.ttl_ms) == ("working", None)
    session = created.task_id.rpartition(".")[0]
    async with served(tools, TasksClient()) as client:  # a new server: the task is in storage
        task = await until_status(client, created.task_id, "input_required")
        ((request, asked),) = task["inputRequests"].items()
        assert asked["method"] == "elicitation/create"
        assert asked["params"]["mode"] == "form"
        assert "May I deploy web?" in asked["params"]["message"]
        assert 'tool: deploy {"service": "web"}' in asked["params"]["message"]
        assert asked["params"]["requestedSchema"]["required"] == ["approve"]
        view = (await client.call_tool("get_run", {"session_id": session})).structured_content
        assert view is not None and view["waiting"]["request_id"] == request
        # A key the task never asked is ignored, as the spec asks: nothing is answered.
        acked = await update_task(client, created.task_id, {"other": {"action": "accept", "content": {}}})
        assert acked["resultType"] == "complete"
        assert acked["_meta"]["io.modelcontextprotocol/serverInfo"]["version"] not in ("", None)
        assert (await get_task(client, created.task_id))["status"] == "input_required"
        bad = {request: {"action": "accept", "content": {"approve": True, "data": "{not json"}}}
        with pytest.raises(MCPError) as refused:
            await update_task(client, created.task_id, bad)
        assert refused.value.error.code == -32602
        assert refused.value.error.message.startswith(
            f"mcp: the answer to request {request} gives data that is not JSON"
        )
        deep = {request: {"action": "accept", "content": {"data": "[" * 200_000 + "]" * 200_000}}}
        with pytest.raises(MCPError) as refused:
            await update_task(client, created.task_id, deep)
        assert refused.value.error.message.endswith(
            "gives data that is not JSON (nested too deep): nothing was answered"
        )
        huge = {request: {"action": "accept", "content": {"data": json.dumps("x" * 130_000)}}}
        with pytest.raises(MCPError) as refused:
            await update_task(client, created.task_id, huge)
        assert refused.value.error.message.startswith("mcp: the answer's data and reason are 130")
        assert refused.value.error.message.endswith("takes at most 120000: nothing was answered")
        assert (await get_task(client, created.task_id))["status"] == "input_required", "refused: nothing changed"
        await update_task(client, created.task_id, {request: {"action": "accept", "content": {"approve": True}}})
        await update_task(client, created.task_id, {request: {"action": "accept", "content": {"approve": True}}})
        done = await until_status(client, created.task_id, "completed", "failed", "cancelled")
    assert done["status"] == "completed", done
    result = CallToolResult.model_validate(done["result"])
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["text"] == "deploy: deployed web"
    assert (result.structured_content["state"], result.structured_content["tool_calls"]) == ("completed", 1)
    assert (tmp_path / "deployed.log").read_text() == "web\n", "answered twice, the tool ran once"


async def test_the_sdk_client_resolves_the_task_to_the_runs_end_and_a_later_start_expires_it(
    tools: Path, tmp_path: Path
):
    declining = TasksClient(approve=False)
    async with served(tools, declining) as client:
        result = await client.call_tool("start_run", {"prompt": 'call deploy {"service": "db"}'})
        assert not result.is_error, result.content
        assert result.structured_content is not None
        assert result.structured_content["state"] == "completed"
        assert declining.seen.count("input_required") >= 1 and declining.seen[-1] == "completed"
        session = result.structured_content["session_id"]
        first = await client.session.call_tool(
            "start_run", {"prompt": "hello", "session_id": session}, allow_claimed=True
        )
        assert isinstance(first, CreateTaskResult)
        await until_status(client, first.task_id, "completed")
        second = await client.session.call_tool(
            "start_run", {"prompt": "hello again", "session_id": session}, allow_claimed=True
        )
        assert isinstance(second, CreateTaskResult) and second.task_id != first.task_id
        with pytest.raises(MCPError) as expired:
            await get_task(client, first.task_id)
        assert expired.value.error.code == -32602
        assert expired.value.error.message == (
            f'mcp: Failed to retrieve task: task {first.task_id!r} has expired: session "{session}" went on '
            "with a later start_run (read it with get_run)"
        )
        ended = await until_status(client, second.task_id, "completed")
        assert ended["result"]["structuredContent"]["turns"] >= 1
        folder = logs_folder(session)
        assert len(list(folder.iterdir())) == 4, "one log a background process: three starts, one answer"
        forgot = subprocess.run(
            [sys.executable, "-m", "nexusflow", "forget", session], capture_output=True, text=True, timeout=120
        )
        assert forgot.returncode == 0, forgot.stderr[-3000:]
        assert forgot.stdout.rstrip().endswith(", 4 background logs"), forgot.stdout
        assert not folder.exists()
        with pytest.raises(MCPError) as gone:
            await get_task(client, second.task_id)
        assert (
            gone.value.error.message
            == f"mcp: Failed to retrieve task: no task {second.task_id!r} is known to this Prefect server"
        )
    assert not (tmp_path / "deployed.log").exists(), "declined: the tool did not run"


async def test_tasks_methods_refuse_a_client_that_declares_none_and_an_unknown_task(tools: Path):
    async with served(tools) as plain:
        started = await plain.call_tool("start_run", {"prompt": "hello"})
        assert started.structured_content is not None and "session_id" in started.structured_content
        assert "taskId" not in started.structured_content, "no task for a client that declared none"
        with pytest.raises(MCPError) as missing:
            await get_task(plain, f"{started.structured_content['session_id']}.0")
        assert missing.value.error.code == -32021
    async with served(tools, TasksClient()) as client:
        for task_id in ("nosuchsession.00", "../etc.00", "x" * 600):
            with pytest.raises(MCPError) as unknown:
                await get_task(client, task_id)
            assert unknown.value.error.code == -32602, task_id


async def test_cancel_stops_a_working_task_and_is_refused_for_one_that_waits_for_input(tools: Path):
    """Cancel is cooperative: a running run is stopped (its task ``cancelled``); a run that
    waits has no process to stop, and the refusal says how to end it."""
    async with served(tools, TasksClient()) as client:
        waiting = await client.session.call_tool(
            "start_run", {"prompt": 'call deploy {"service": "api"}'}, allow_claimed=True
        )
        working = await client.session.call_tool(
            "start_run", {"prompt": 'call wait_long {"seconds": 600}'}, allow_claimed=True
        )
        assert isinstance(waiting, CreateTaskResult) and isinstance(working, CreateTaskResult)
        asked = await until_status(client, waiting.task_id, "input_required")
        (request,) = asked["inputRequests"]
        with pytest.raises(MCPError) as refused:
            await client.session.send_request(CancelTask(params=TaskIdParams(task_id=waiting.task_id)), _ANY)
        session = waiting.task_id.rpartition(".")[0]
        assert refused.value.error.message == (
            f'mcp: session "{session}" is waiting for request {request}: there is no run to cancel '
            "(decline the request to end its turn)"
        )
        assert (await get_task(client, waiting.task_id))["status"] == "input_required"
        seen = []
        with anyio.move_on_after(240):
            while not (said := (await get_task(client, working.task_id))["statusMessage"]).endswith("last step turn-0"):
                seen.append(said)
                await anyio.sleep(0.5)  # its first turn is stored: the tool starts
        assert said.endswith("last step turn-0"), seen[-3:]
        await client.session.send_request(CancelTask(params=TaskIdParams(task_id=working.task_id)), _ANY)
        ended = await until_status(client, working.task_id, "cancelled", "completed", "failed")
        assert ended["status"] == "cancelled", ended
        assert "result" not in ended
        # Cancelling an ended task is acknowledged and changes nothing.
        await client.session.send_request(CancelTask(params=TaskIdParams(task_id=working.task_id)), _ANY)
        assert (await get_task(client, working.task_id))["status"] == "cancelled"


@contextmanager
def http_served(tools: Path, log: Path) -> Iterator[tuple[str, str]]:
    args = ["--tools", f"{tools}:deploy", "--http", "0"]
    with open(log, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "nexusflow", "mcp", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "NEXUSFLOW_MCP_START_WAIT": "300"},
        )
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"MCP server on (http://\S+/mcp); bearer token: (\S+)", log.read_text())):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield found.group(1), found.group(2)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


async def test_over_http_a_task_is_answered_to_its_end(tools: Path, tmp_path: Path):
    """Over streamable HTTP, through the bearer token and the Host and Origin checks: the
    ``tasks/*`` methods pass the guard as the tools do."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    with http_served(tools, tmp_path / "server.log") as (url, token):
        tasks = TasksClient()
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=300) as http,
            Client(
                streamable_http_client(url, http_client=http), read_timeout_seconds=300, extensions=[tasks]
            ) as client,
        ):
            assert client.protocol_version == "2026-07-28"
            result = await client.call_tool("start_run", {"prompt": 'call deploy {"service": "http"}'})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert (result.structured_content["state"], result.structured_content["text"]) == (
        "completed",
        "deploy: deployed http",
    )
    assert "input_required" in tasks.seen
    assert (tmp_path / "deployed.log").read_text() == "http\n"
