"""The toolkit's served MCP endpoint under a local flood (issue 41), with no run and no server:
idle connections time out, connections without the token are capped, shutdown is bounded with
a request in flight, the token is compared in constant time. A run that completes while
another process holds 20,000 idle connections to the port: tests/server/transports/test_mcp_runs.py."""

import hmac
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from nexusflow import Toolkit
from nexusflow.transports.acp.served import ServedToolkit, serve_toolkit

from helpers.mcp_endpoints import add, port

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def served() -> AsyncIterator[ServedToolkit]:
    async with await Toolkit.load(tools=[add]) as toolkit, serve_toolkit(toolkit.specs(), toolkit.call) as endpoint:
        yield endpoint


async def call_add(endpoint: ServedToolkit) -> str:
    async with (
        httpx2.AsyncClient(headers=endpoint.headers) as http,
        Client(streamable_http_client(endpoint.url, http_client=http)) as client,
    ):
        result = await client.call_tool("add", {"a": 1, "b": 2})
    return "".join(getattr(block, "text", "") for block in result.content)


async def closed_by_the_server(stream: anyio.abc.SocketStream) -> bytes:
    """What the server sent before it closed the connection."""
    received = b""
    while True:
        try:
            received += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return received


async def test_a_connection_without_a_whole_request_is_closed_after_the_idle_timeout(monkeypatch):
    monkeypatch.setenv("NEXUSFLOW_SERVED_IDLE_TIMEOUT", "0.5")
    async with served() as endpoint:
        silent = await anyio.connect_tcp("127.0.0.1", port(endpoint.url))
        partial = await anyio.connect_tcp("127.0.0.1", port(endpoint.url))
        await partial.send(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finished
        started = time.monotonic()
        with anyio.fail_after(5):
            assert await closed_by_the_server(silent) == b""
            assert await closed_by_the_server(partial) == b""
        assert 0.4 < time.monotonic() - started < 2
        assert await call_add(endpoint) == "3"
        for stream in (silent, partial):
            await stream.aclose()


async def test_connections_without_the_token_are_capped_the_oldest_silent_one_goes_first(monkeypatch):
    monkeypatch.setenv("NEXUSFLOW_SERVED_MAX_UNAUTHORISED", "4")
    async with served() as endpoint:
        spoke = await anyio.connect_tcp("127.0.0.1", port(endpoint.url))
        await spoke.send(b"POST /mcp HTTP/1.1\r\n")
        silent = [await anyio.connect_tcp("127.0.0.1", port(endpoint.url)) for _ in range(10)]
        with anyio.fail_after(5):
            for stream in silent[:7]:
                assert await closed_by_the_server(stream) == b""
        await anyio.sleep(0.2)
        for stream in (spoke, *silent[7:]):
            with pytest.raises(TimeoutError), anyio.fail_after(0.02):
                await stream.receive()
        assert await call_add(endpoint) == "3", "the token's holder still gets through"
        for stream in (spoke, *silent):
            await stream.aclose()


@pytest.mark.slow  # the bound is whole seconds: 1.4 s
async def test_shutdown_is_bounded_with_an_authorised_request_whose_body_never_ends(monkeypatch):
    monkeypatch.setenv("NEXUSFLOW_SERVED_SHUTDOWN_TIMEOUT", "1")
    with anyio.fail_after(10):
        async with served() as endpoint:
            stream = await anyio.connect_tcp("127.0.0.1", port(endpoint.url))
            head = (
                "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Accept: application/json, text/event-stream\r\n"
                f"Authorization: Bearer {endpoint.token}\r\nContent-Length: 1000000\r\n\r\n"
            )
            await stream.send(head.encode() + b'{"jsonrpc": "2.0", ')
            await anyio.sleep(0.2)
            started = time.monotonic()
        assert time.monotonic() - started < 1.5
        assert (await closed_by_the_server(stream)).startswith(b"HTTP/1.1 500 ")
        await stream.aclose()


async def test_a_wrong_token_is_refused_and_compared_in_constant_time(monkeypatch):
    compared: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def compare_digest(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare_digest)
    async with served() as endpoint, httpx2.AsyncClient() as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        for authorization in (
            None,
            "",
            f"Bearer {endpoint.token[:-1]}",
            f"Bearer {endpoint.token}x",
            f"bearer {endpoint.token}",
            endpoint.token,
        ):
            headers = {} if authorization is None else {"Authorization": authorization}
            response = await http.post(endpoint.url, json=body, headers=headers)
            assert (response.status_code, response.text) == (401, "unauthorized"), authorization
        assert await call_add(endpoint) == "3"
    assert len(compared) >= 7 and all(expected == f"Bearer {endpoint.token}".encode() for _, expected in compared)
