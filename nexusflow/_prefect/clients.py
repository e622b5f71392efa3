"""The Prefect API clients a run uses, built on one TLS context per process.

Prefect's client builds a TLS context for every client it makes, loading certifi's bundle
even for a plain-HTTP API: about 20 ms of CPU, twice a run (the flow engine's async client,
and the sync one for Prefect's own sync calls), the largest single CPU cost of a short run
(``benchmarks/README.md``). A client handed a context reuses it."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import cache
from typing import Any

import certifi
from prefect.client.orchestration import get_client
from prefect.context import AsyncClientContext, SyncClientContext
from prefect.settings import get_current_settings


@cache
def _tls(insecure: bool, cafile: str) -> ssl.SSLContext:
    """The context Prefect's client would build for these settings, built once."""
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=cafile)


def _httpx_settings() -> dict[str, Any]:
    api = get_current_settings().api
    return {"verify": _tls(api.tls_insecure_skip_verify, api.ssl_cert_file or certifi.where())}


@asynccontextmanager
async def run_clients() -> AsyncIterator[None]:
    """The async and sync client contexts of a run, entered unless the caller's are (a run
    inside a user's flow uses that flow's clients). Made as Prefect's own ``get_or_create``
    makes them, but with the shared TLS context, and recorded without its settings so that
    every ``get_client()`` in the run finds them."""
    async with AsyncExitStack() as stack:
        if SyncClientContext.get() is None:
            sync = get_client(sync_client=True, httpx_settings=_httpx_settings())
            stack.enter_context(SyncClientContext.model_construct(client=sync))
        current = AsyncClientContext.get()
        if current is None or current.client.loop is not asyncio.get_running_loop():
            client = get_client(httpx_settings=_httpx_settings())
            await stack.enter_async_context(AsyncClientContext.model_construct(client=client))
        yield
