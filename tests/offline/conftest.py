"""No test here talks to a Prefect server: the API points at a closed port (tests/conftest.py).
A test that asks for the session's server is refused at collection: it belongs in
tests/server/."""

from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    served = [
        item.nodeid
        for item in items
        if item.path.is_relative_to(here) and "prefect_server" in getattr(item, "fixturenames", ())
    ]
    if served:
        raise pytest.UsageError(f"tests/offline/ holds tests without a server; move these to tests/server/: {served}")
