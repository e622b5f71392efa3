"""The run's Prefect clients, made once and found by every ``get_client()`` inside the run
(a client's context checks the API as it opens: on the session's server). A guarding test of
the ledger in nexusflow/_prefect/README.md."""

import pytest

pytestmark = pytest.mark.anyio


async def test_get_client_inside_a_run_finds_the_runs_clients() -> None:
    """``run_clients`` records its contexts with ``model_construct`` (the ledger's entry): every
    ``get_client()`` of the run, async and sync, must find them, or each makes a client (and a
    TLS context) of its own."""
    from prefect.client.orchestration import get_client
    from prefect.context import AsyncClientContext, SyncClientContext

    from nexusflow._prefect.clients import run_clients

    assert AsyncClientContext.get() is None and SyncClientContext.get() is None
    async with run_clients():
        run_async, run_sync = AsyncClientContext.get(), SyncClientContext.get()
        assert run_async is not None and run_sync is not None
        assert get_client() is run_async.client
        assert get_client(sync_client=True) is run_sync.client
    assert AsyncClientContext.get() is None and SyncClientContext.get() is None
