"""Every test here runs a real agent CLI from npm against the scripted model server on
127.0.0.1, as a run on the session's Prefect server: marked ``live`` and given the server
here, once."""

import pytest
from folders import mark_folder


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, pytest.mark.live)


@pytest.fixture(autouse=True)
def _on_the_session_server(prefect_server: str) -> None:
    """Every live run is a flow run on the session's server."""
