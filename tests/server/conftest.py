"""Every test here talks to the session's Prefect server (one per xdist worker, started by
tests/conftest.py while the tests that need none run first): asked for once, here."""

import pytest


@pytest.fixture(autouse=True)
def _on_the_session_server(prefect_server: str) -> None:
    """The folder's tests all need the server; none has to say so."""
