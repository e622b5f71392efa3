"""A real MCP server for the tests: ``stdio``, or ``http PORT [TOKEN]`` (streamable HTTP on
127.0.0.1, answering 401 unless ``Authorization: Bearer TOKEN`` is sent)."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("test-tools")


@server.tool()
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


@server.tool()
def server_env(name: str) -> str:
    """The value of an environment variable in the server process, or '<unset>'."""
    return os.environ.get(name, "<unset>")


@server.tool()
def broken() -> str:
    """Always fails."""
    raise RuntimeError("the broken tool broke")


def _guard(app, token: str):
    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        port = int(sys.argv[2])
        app = server.streamable_http_app()
        if len(sys.argv) > 3:
            app = _guard(app, sys.argv[3])
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
