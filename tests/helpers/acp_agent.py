"""A scripted ACP agent for hermetic tests of the ACP transport.

It speaks newline-delimited JSON-RPC on stdio like a real agent, calls the client's MCP
server for real (over HTTP with the given headers, or through the stdio bridge), asks
permissions, and misbehaves on cue. Everything it receives and does is appended to
$ACP_AGENT_DIR/log.jsonl; $ACP_AGENT_DIR/script.json says what to do:

    {"initialize": <the initialize result>,
     "session": <extra keys for session/new>,
     "set_model": "missing" (answer -32601),
     "prompts": [[action, ...], ...]}   one list per session/prompt, in order

Actions: {"say": text}, {"thought": text}, {"update": {...}}, {"tool": name, "arguments": {},
"permission": true}, {"shell": command}, {"unauthorized": true}, {"request": method},
{"notify": method}, {"stderr": line count}, {"malformed": true}, {"sleep": seconds}, {"crash": code}, {"stop": reason},
{"usage": {...}}, {"after": [update, ...]}.
With --one-shot it is a one-shot CLI instead: it reads a prompt and prints a final answer.
Sessions are kept in $ACP_AGENT_DIR/sessions.json and prompts are counted in
$ACP_AGENT_DIR/prompt_count, so a second agent process continues the script and can load
the first one's sessions.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if sys.argv[1:] == ["--one-shot"]:  # the same agent as a one-shot CLI, for benchmarks
    sys.stdin.read()
    sys.stdout.write('{"content": "ok"}\n')
    sys.exit(0)

ROOT = Path(os.environ["ACP_AGENT_DIR"])
SCRIPT = json.loads((ROOT / "script.json").read_text())


def log(kind: str, **data: Any) -> None:
    with open(ROOT / "log.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"kind": kind, "pid": os.getpid(), **data}) + "\n")


class Agent:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.servers: dict[str, list[dict[str, Any]]] = {}
        self.cancelled: dict[str, asyncio.Event] = {}
        self.mcp: dict[str, Any] = {}

    def send(self, message: dict[str, Any]) -> None:
        self.writer.write((json.dumps(message) + "\n").encode())

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        request_id = self.next_id
        self.next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await future

    def update(self, session: str, update: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}})

    def sessions(self) -> dict[str, list[str]]:
        path = ROOT / "sessions.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def remember(self, session: str, text: str) -> None:
        sessions = self.sessions()
        sessions.setdefault(session, []).append(text)
        (ROOT / "sessions.json").write_text(json.dumps(sessions))

    async def handle(self, message: dict[str, Any]) -> None:
        method, params, request_id = message.get("method"), message.get("params") or {}, message.get("id")
        log("received", method=method, params=params, id=request_id)
        try:
            result = await self.answer(method, params)
        except LookupError as exc:
            self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": str(exc)}})
            return
        if request_id is not None:
            self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def answer(self, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            return SCRIPT.get(
                "initialize", {"protocolVersion": 1, "agentCapabilities": {"mcpCapabilities": {"http": True}}}
            )
        if method == "session/new":
            session = f"sess-{os.getpid()}-{len(self.servers)}"
            self.servers[session] = params.get("mcpServers", [])
            self.remember(session, "(created)")
            return {"sessionId": session, **SCRIPT.get("session", {})}
        if method in ("session/load", "session/resume"):
            session = params["sessionId"]
            history = self.sessions().get(session)
            if history is None:
                raise LookupError(f"no session {session}")
            self.servers[session] = params.get("mcpServers", [])
            if method == "session/load":
                for text in history:
                    self.update(
                        session, {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}
                    )
            return {}
        if method == "session/set_model" and SCRIPT.get("set_model") == "missing":
            raise LookupError("session/set_model is not supported")
        if method in ("session/set_config_option", "session/set_model", "session/set_mode"):
            return {}
        if method == "session/cancel":
            self.cancelled.setdefault(params.get("sessionId"), asyncio.Event()).set()
            return None
        if method == "session/prompt":
            return await self.prompt(params)
        raise LookupError(f"{method} is not supported")

    async def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = params["sessionId"]
        text = "".join(block.get("text", "") for block in params.get("prompt", []))
        self.remember(session, text)
        counter = ROOT / "prompt_count"
        index = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(index + 1))
        actions = SCRIPT["prompts"][index]
        cancelled = self.cancelled[session] = asyncio.Event()
        reply: dict[str, Any] = {"stopReason": "end_turn"}
        after: list[dict[str, Any]] = []
        for action in actions:
            if cancelled.is_set():
                break
            if "say" in action:
                self.update(
                    session,
                    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": action["say"]}},
                )
            elif "thought" in action:
                self.update(
                    session,
                    {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": action["thought"]}},
                )
            elif "update" in action:
                self.update(session, action["update"])
            elif "tool" in action:
                await self.call_tool(session, action)
            elif "shell" in action:
                outcome = await self.ask(
                    session, {"toolCallId": "shell-1", "title": f"Run shell: {action['shell']}", "kind": "execute"}
                )
                log("shell_permission", outcome=outcome)
            elif "unauthorized" in action:
                await self.unauthorized(session)
            elif "request" in action:
                try:
                    result = await self.request(action["request"], {"sessionId": session, "path": "/etc/passwd"})
                    log("request_answered", method=action["request"], result=result)
                except RuntimeError as exc:
                    log("request_refused", method=action["request"], error=json.loads(str(exc)))
            elif "notify" in action:
                self.send({"jsonrpc": "2.0", "method": action["notify"], "params": {"anything": True}})
            elif "stderr" in action:
                sys.stderr.write("agent log line\n" * action["stderr"])
                sys.stderr.flush()
            elif "malformed" in action:
                self.writer.write(b"this is not json {\n")
            elif "sleep" in action:
                try:
                    await asyncio.wait_for(cancelled.wait(), action["sleep"])
                except TimeoutError:
                    pass
            elif "crash" in action:
                await self.writer.drain()
                os._exit(action["crash"])
            elif "stop" in action:
                reply["stopReason"] = action["stop"]
            elif "usage" in action:
                reply["usage"] = action["usage"]
            elif "after" in action:
                after = action["after"]
        if cancelled.is_set():
            reply = {"stopReason": "cancelled"}
            log("cancelled", session=session)
        asyncio.get_running_loop().call_soon(self.send_after, session, after)
        return reply

    def send_after(self, session: str, updates: list[dict[str, Any]]) -> None:
        for update in updates:
            self.update(session, update)

    async def ask(self, session: str, tool_call: dict[str, Any]) -> Any:
        options = [
            {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
            {"optionId": "always", "name": "Always", "kind": "allow_always"},
            {"optionId": "no", "name": "Reject", "kind": "reject_once"},
        ]
        result = await self.request(
            "session/request_permission", {"sessionId": session, "toolCall": tool_call, "options": options}
        )
        log("permission_response", result=result)
        return result.get("outcome")

    def server(self, session: str) -> dict[str, Any]:
        return self.servers[session][0]

    async def client(self, session: str) -> Any:
        if session not in self.mcp:
            from contextlib import AsyncExitStack

            import httpx2
            from mcp import Client, StdioServerParameters
            from mcp.client.streamable_http import streamable_http_client

            server = self.server(session)
            stack = AsyncExitStack()
            if server.get("type") == "http":
                headers = {h["name"]: h["value"] for h in server.get("headers", [])}
                http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers))
                client = Client(streamable_http_client(server["url"], http_client=http))
            else:
                env = {**os.environ, **{e["name"]: e["value"] for e in server.get("env", [])}}
                client = Client(StdioServerParameters(command=server["command"], args=server["args"], env=env))
            self.mcp[session] = await stack.enter_async_context(client)
            log("mcp_connected", transport=server.get("type", "stdio"), name=server["name"])
        return self.mcp[session]

    async def call_tool(self, session: str, action: dict[str, Any]) -> None:
        name = self.server(session)["name"]
        call_id = f"call-{action['tool']}-{self.next_id}"
        title = f"mcp__{name}__{action['tool']}"
        self.update(session, {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": title, "status": "pending"})
        if action.get("permission"):
            outcome = await self.ask(session, {"toolCallId": call_id, "title": title})
            log("tool_permission", tool=action["tool"], outcome=outcome)
            if outcome.get("optionId") not in ("yes", "always"):
                return
        client = await self.client(session)
        started = time.perf_counter()
        result = await client.call_tool(action["tool"], action.get("arguments", {}))
        seconds = time.perf_counter() - started
        text = "".join(getattr(block, "text", "") for block in result.content)
        log("tool_result", tool=action["tool"], text=text, is_error=result.is_error, seconds=seconds)
        self.update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed"})

    async def unauthorized(self, session: str) -> None:
        import httpx2

        server = self.server(session)
        async with httpx2.AsyncClient() as http:
            response = await http.post(server["url"], json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        log("unauthorized", status=response.status_code)


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    agent = Agent(writer)
    log("started", env=dict(os.environ), argv=sys.argv[1:], cwd=os.getcwd(), pgid=os.getpgid(0))
    tasks: set[asyncio.Task[None]] = set()
    while line := await reader.readline():
        message = json.loads(line)
        if "method" in message:
            task = asyncio.create_task(agent.handle(message))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        else:
            future = agent.waiting.pop(message["id"])
            if "error" in message:
                future.set_exception(RuntimeError(json.dumps(message["error"])))
            else:
                future.set_result(message.get("result"))
    log("stdin_closed")


if __name__ == "__main__":
    asyncio.run(main())
