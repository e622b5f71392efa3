"""A scripted ACP agent for hermetic tests of the ACP transport.

It speaks ACP on stdio like a real agent, calls the client's MCP server for real (over HTTP
with the given headers, or through the stdio bridge), asks permissions, and misbehaves on
cue. Everything it receives and does is appended to $ACP_AGENT_DIR/log.jsonl;
$ACP_AGENT_DIR/script.json says what to do:

    {"initialize": <the initialize result>,
     "session": <extra keys for the session/new, session/load and session/resume results>,
     "set_model": "missing" (answer -32601),
     "new_error": {"error": message, "code": code, "data": data} (session/new is answered with that error),
     "prompts": [[action, ...], ...]}   one list per session/prompt, in order

Actions: {"say": text}, {"thought": text}, {"update": {...}}, {"tool": name, "arguments": {},
"permission": true}, {"shell": command}, {"unauthorized": true}, {"request": method},
{"notify": method}, {"stderr": line count}, {"malformed": true}, {"sleep": seconds}, {"await": file name} (until
$ACP_AGENT_DIR/<file name> exists or the turn is cancelled, at most 300 s), {"crash": code}, {"stop": reason},
{"usage": {...}}, {"after": [update, ...]}, {"error": message, "code": code, "data": data} (the prompt is
answered with that JSON-RPC error, -32603 by default), {"flood": byte count} (that many bytes and no newline, raw),
{"stderr_flood": byte count} (the same on stderr).
With --one-shot it is a one-shot CLI instead: it reads a prompt and prints a final answer.
Sessions are kept in $ACP_AGENT_DIR/sessions.json and prompts are counted in
$ACP_AGENT_DIR/prompt_count, so a second agent process continues the script and can load
the first one's sessions.

So that the agent is not written by the same hand as our client, its protocol runs on the
official SDK (``agent-client-protocol``): the SDK frames and parses every line, routes and
validates the client's requests into the ``Agent`` methods below, numbers and matches the
agent's own requests, and sends updates and permission requests as its typed models
(``say``, ``thought``, ``tool``, ``shell``, session/load's replay, and any ``update`` or
``after`` update its models take whole).

What the SDK cannot express goes through the raw layer, ``Wire``, and is logged as a
``raw`` entry: update kinds its models reject or would alter, results they reject or would
alter (a bad ``protocolVersion``, an unknown ``stopReason``, an off-schema ``usage``: returned
as plain dicts, which the SDK sends unvalidated), ``request`` (the client offered no fs or
terminal capability, so any such request is out of protocol) and ``notify`` of any method,
``malformed`` lines, and answering the legacy ``session/set_model``, which the SDK has no
route for. A raw line is written whole with one write to the SDK's own stdout writer, and
every SDK send is awaited until written, so lines never interleave and keep script order.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if sys.argv[1:] == ["--one-shot"]:  # the same agent as a one-shot CLI, for benchmarks
    sys.stdin.read()
    sys.stdout.write('{"content": "ok"}\n')
    sys.exit(0)

from pydantic._internal import _config, _fields

# Building the SDK's ~280 models on import costs ~0.7 s per agent process, half of it reading
# their field docstrings from source; the agent needs no docstrings and only a few models, so
# it skips the one and builds the others on first use (pydantic internals, checked loudly).
assert hasattr(_fields, "_update_fields_from_docstrings") and "defer_build" in _config.config_defaults
_fields._update_fields_from_docstrings = lambda *args, **kwargs: None  # type: ignore[assignment]
_config.config_defaults["defer_build"] = True

from acp import (  # noqa: E402
    RequestError,
    schema,
    stdio_streams,
    update_agent_message_text,
    update_agent_thought_text,
    update_user_message_text,
)
from acp._transport import NdjsonTransport  # noqa: E402
from acp.core import AgentSideConnection  # noqa: E402
from acp.task import MessageSender, TaskSupervisor  # noqa: E402
from acp.utils import serialize_params  # noqa: E402
from pydantic import BaseModel, ValidationError  # noqa: E402

ROOT = Path(os.environ["ACP_AGENT_DIR"])
SCRIPT = json.loads((ROOT / "script.json").read_text())
RAW_IDS = 1_000_000
"""Raw requests number from here, clear of the SDK's own request ids (which start at 0)."""


def log(kind: str, **data: Any) -> None:
    with open(ROOT / "log.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"kind": kind, "pid": os.getpid(), **data}) + "\n")


def whole(model: type[BaseModel], payload: dict[str, Any], dump: Callable[[BaseModel], Any]) -> Any:
    """``payload`` as the SDK's model if it validates and the SDK would send it back unchanged
    (compared as JSON text, so ``true`` is not ``1``), else None."""
    try:
        parsed = model.model_validate(payload)
    except ValidationError:
        return None
    return parsed if json.dumps(dump(parsed), sort_keys=True) == json.dumps(payload, sort_keys=True) else None


def typed(model: type[BaseModel], payload: dict[str, Any]) -> Any:
    """The SDK's model of a scripted result if it takes it whole; else the dict itself, which
    the SDK sends unvalidated, so a hostile value reaches the client exactly as scripted."""
    parsed = whole(
        model, payload, lambda m: m.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)
    )
    if parsed is None:
        log("raw", what=model.__name__, payload=payload)
        return payload
    return parsed


class Wire:
    """The SDK's own newline-JSON framing as the connection's transport, plus the raw layer.

    It sees every line: it logs what arrives, matches the answers to raw requests, notes the
    client's raw answer to each permission request (the SDK hands the agent only its parse),
    answers session/set_model, and tells the agent when a turn's response has been written.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.ndjson = NdjsonTransport(reader, MessageSender(writer, TaskSupervisor(source="scripted-agent")))
        self.raw_ids = itertools.count(RAW_IDS)
        self.raw_waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.asked: set[int] = set()
        self.turns: dict[Any, str] = {}
        self.turn_answered: Callable[[str], None] = lambda session: None

    async def send(self, message: dict[str, Any]) -> None:
        if message.get("method") == "session/request_permission":
            self.asked.add(message["id"])
        await self.ndjson.send(message)
        if "method" not in message and message.get("id") in self.turns:
            self.turn_answered(self.turns.pop(message["id"]))

    async def receive(self) -> dict[str, Any] | None:
        while (message := await self.ndjson.receive()) is not None:
            method, request_id = message.get("method"), message.get("id")
            if method is None:
                if request_id in self.raw_waiting:
                    self.raw_waiting.pop(request_id).set_result(message)
                    continue
                if request_id in self.asked and "result" in message:
                    self.asked.discard(request_id)
                    log("permission_response", result=message["result"])
                return message
            log("received", method=method, params=message.get("params") or {}, id=request_id)
            if method == "session/prompt":
                self.turns[request_id] = (message.get("params") or {}).get("sessionId")
            if method == "session/set_model" and SCRIPT.get("set_model") != "missing":
                await self.raw_message({"jsonrpc": "2.0", "id": request_id, "result": {}})
                continue
            return message
        log("stdin_closed")
        return None

    async def close(self) -> None:
        await self.ndjson.close()

    async def raw(self, line: bytes, what: str) -> None:
        log("raw", what=what)
        self.writer.write(line)
        await self.writer.drain()

    async def raw_message(self, message: dict[str, Any]) -> None:
        await self.raw((json.dumps(message) + "\n").encode(), message.get("method") or "response")

    async def raw_request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.raw_ids)
        answer = self.raw_waiting[request_id] = asyncio.get_running_loop().create_future()
        await self.raw_message({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await answer

    async def flood(self, size: int) -> None:
        """``size`` bytes of one line that never ends, a MiB per write (a reader that stops
        reading leaves this blocked until it is killed)."""
        log("raw", what="flood")
        chunk = b"x" * 2**20
        for start in range(0, size, len(chunk)):
            self.writer.write(chunk[: size - start])
            await self.writer.drain()

    async def flush(self) -> None:
        """Wait until stdout has taken every byte, so a crash loses nothing already sent."""
        await self.writer.drain()
        while self.writer.transport.get_write_buffer_size():
            await asyncio.sleep(0.01)


def sessions() -> dict[str, list[str]]:
    path = ROOT / "sessions.json"
    return json.loads(path.read_text()) if path.exists() else {}


def remember(session: str, text: str) -> None:
    known = sessions()
    known.setdefault(session, []).append(text)
    (ROOT / "sessions.json").write_text(json.dumps(known))


McpServers = list[schema.HttpMcpServer | schema.SseMcpServer | schema.AcpMcpServer | schema.McpServerStdio] | None


class ScriptedAgent:
    """The SDK's ``Agent`` interface, playing the script."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.conn: AgentSideConnection
        self.servers: dict[str, McpServers] = {}
        self.cancelled: dict[str, asyncio.Event] = {}
        self.after: dict[str, list[dict[str, Any]]] = {}
        self.mcp: dict[str, Any] = {}
        self.call_ids = itertools.count()
        self.tasks: set[asyncio.Task[None]] = set()
        wire.turn_answered = self.send_after

    def on_connect(self, conn: AgentSideConnection) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **_: Any) -> Any:
        default = {"protocolVersion": 1, "agentCapabilities": {"mcpCapabilities": {"http": True}}}
        return typed(schema.InitializeResponse, SCRIPT.get("initialize", default))

    async def new_session(self, cwd: str, mcp_servers: McpServers = None, **_: Any) -> Any:
        if (refused := SCRIPT.get("new_error")) is not None:
            raise RequestError(refused.get("code", -32603), refused["error"], refused.get("data"))
        session = f"sess-{os.getpid()}-{len(self.servers)}"
        self.servers[session] = mcp_servers
        remember(session, "(created)")
        return typed(schema.NewSessionResponse, {"sessionId": session, **SCRIPT.get("session", {})})

    def reopen(self, session_id: str, mcp_servers: McpServers) -> list[str]:
        history = sessions().get(session_id)
        if history is None:
            raise RequestError(-32601, f"no session {session_id}")
        self.servers[session_id] = mcp_servers
        return history

    async def load_session(self, cwd: str, session_id: str, mcp_servers: McpServers = None, **_: Any) -> Any:
        for text in self.reopen(session_id, mcp_servers):
            await self.conn.session_update(session_id, update_user_message_text(text))
        return typed(schema.LoadSessionResponse, SCRIPT.get("session", {}))

    async def resume_session(self, session_id: str, cwd: str, mcp_servers: McpServers = None, **_: Any) -> Any:
        self.reopen(session_id, mcp_servers)
        return typed(schema.ResumeSessionResponse, SCRIPT.get("session", {}))

    async def set_session_mode(self, session_id: str, mode_id: str, **_: Any) -> None:
        return None

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool, **_: Any) -> None:
        return None

    async def cancel(self, session_id: str, **_: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def update(self, session: str, update: dict[str, Any]) -> None:
        """An update through the SDK's models if they take it whole, else raw."""
        payload = {"sessionId": session, "update": update}
        parsed = whole(schema.SessionNotification, payload, serialize_params)
        if parsed is not None:
            await self.conn.session_update(session, parsed.update)
        else:
            await self.wire.raw_message({"jsonrpc": "2.0", "method": "session/update", "params": payload})

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> Any:
        session = session_id
        remember(session, "".join(getattr(block, "text", "") for block in prompt))
        counter = ROOT / "prompt_count"
        index = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(index + 1))
        cancelled = self.cancelled[session] = asyncio.Event()
        reply: dict[str, Any] = {"stopReason": "end_turn"}
        for action in SCRIPT["prompts"][index]:
            if cancelled.is_set():
                break
            if "say" in action:
                await self.conn.session_update(session, update_agent_message_text(action["say"]))
            elif "thought" in action:
                await self.conn.session_update(session, update_agent_thought_text(action["thought"]))
            elif "update" in action:
                await self.update(session, action["update"])
            elif "tool" in action:
                await self.call_tool(session, action)
            elif "shell" in action:
                tool_call = schema.ToolCallUpdate(
                    tool_call_id="shell-1", title=f"Run shell: {action['shell']}", kind="execute"
                )
                log("shell_permission", outcome=await self.ask(session, tool_call))
            elif "unauthorized" in action:
                await self.unauthorized(session)
            elif "request" in action:
                answer = await self.wire.raw_request(action["request"], {"sessionId": session, "path": "/etc/passwd"})
                if "error" in answer:
                    log("request_refused", method=action["request"], error=answer["error"])
                else:
                    log("request_answered", method=action["request"], result=answer.get("result"))
            elif "notify" in action:
                await self.wire.raw_message(
                    {"jsonrpc": "2.0", "method": action["notify"], "params": {"anything": True}}
                )
            elif "stderr" in action:
                sys.stderr.write("agent log line\n" * action["stderr"])
                sys.stderr.flush()
            elif "stderr_flood" in action:
                sys.stderr.write("x" * action["stderr_flood"])
                sys.stderr.flush()
            elif "malformed" in action:
                await self.wire.raw(b"this is not json {\n", "malformed")
            elif "flood" in action:
                await self.wire.flood(action["flood"])
            elif "sleep" in action:
                try:
                    await asyncio.wait_for(cancelled.wait(), action["sleep"])
                except TimeoutError:
                    pass
            elif "await" in action:
                deadline = time.monotonic() + 300
                while not (ROOT / action["await"]).exists() and not cancelled.is_set() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            elif "crash" in action:
                await self.wire.flush()
                os._exit(action["crash"])
            elif "stop" in action:
                reply["stopReason"] = action["stop"]
            elif "usage" in action:
                reply["usage"] = action["usage"]
            elif "after" in action:
                self.after[session] = action["after"]
            elif "error" in action:
                raise RequestError(action.get("code", -32603), action["error"], action.get("data"))
        if cancelled.is_set():
            reply = {"stopReason": "cancelled"}
            log("cancelled", session=session)
        return typed(schema.PromptResponse, reply)

    def send_after(self, session: str) -> None:
        """Sends the turn's ``after`` updates; the wire calls it once the turn's response is written."""
        updates = self.after.pop(session, [])
        if updates:
            task = asyncio.create_task(self.send_updates(session, updates))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def send_updates(self, session: str, updates: list[dict[str, Any]]) -> None:
        for update in updates:
            await self.update(session, update)

    async def ask(self, session: str, tool_call: schema.ToolCallUpdate) -> dict[str, Any]:
        options = [
            schema.PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
            schema.PermissionOption(option_id="always", name="Always", kind="allow_always"),
            schema.PermissionOption(option_id="no", name="Reject", kind="reject_once"),
        ]
        response = await self.conn.request_permission(session_id=session, tool_call=tool_call, options=options)
        return response.outcome.model_dump(mode="json", by_alias=True, exclude_none=True)

    def server(self, session: str) -> Any:
        servers = self.servers[session]
        assert servers, "the client gave no MCP server"
        return servers[0]

    async def client(self, session: str) -> Any:
        if session not in self.mcp:
            from contextlib import AsyncExitStack

            import httpx2
            from mcp import Client, StdioServerParameters
            from mcp.client.streamable_http import streamable_http_client

            server = self.server(session)
            stack = AsyncExitStack()
            if isinstance(server, schema.HttpMcpServer):
                headers = {h.name: h.value for h in server.headers}
                http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers))
                client = Client(streamable_http_client(server.url, http_client=http))
                transport = "http"
            else:
                env = {**os.environ, **{e.name: e.value for e in server.env}}
                client = Client(StdioServerParameters(command=server.command, args=server.args, env=env))
                transport = "stdio"
            self.mcp[session] = await stack.enter_async_context(client)
            log("mcp_connected", transport=transport, name=server.name)
        return self.mcp[session]

    async def call_tool(self, session: str, action: dict[str, Any]) -> None:
        name = self.server(session).name
        call_id = f"call-{action['tool']}-{next(self.call_ids)}"
        title = f"mcp__{name}__{action['tool']}"
        await self.conn.session_update(
            session,
            schema.ToolCallStart(session_update="tool_call", tool_call_id=call_id, title=title, status="pending"),
        )
        if action.get("permission"):
            outcome = await self.ask(session, schema.ToolCallUpdate(tool_call_id=call_id, title=title))
            log("tool_permission", tool=action["tool"], outcome=outcome)
            if outcome.get("optionId") not in ("yes", "always"):
                return
        client = await self.client(session)
        started = time.perf_counter()
        result = await client.call_tool(action["tool"], action.get("arguments", {}))
        seconds = time.perf_counter() - started
        text = "".join(getattr(block, "text", "") for block in result.content)
        log("tool_result", tool=action["tool"], text=text, is_error=result.is_error, seconds=seconds)
        await self.conn.session_update(
            session,
            schema.ToolCallProgress(session_update="tool_call_update", tool_call_id=call_id, status="completed"),
        )

    async def unauthorized(self, session: str) -> None:
        import httpx2

        server = self.server(session)
        async with httpx2.AsyncClient() as http:
            response = await http.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        log("unauthorized", status=response.status_code)


async def main(agent_class: type[ScriptedAgent] = ScriptedAgent) -> None:
    reader, writer = await stdio_streams(limit=2**24)
    wire = Wire(reader, writer)
    log("started", env=dict(os.environ), argv=sys.argv[1:], cwd=os.getcwd(), pgid=os.getpgid(0))
    connection = AgentSideConnection(agent_class(wire), wire, listening=False, use_unstable_protocol=True)
    try:
        await connection.listen()
    finally:
        await connection.close()


if __name__ == "__main__":
    asyncio.run(main())
