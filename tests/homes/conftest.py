"""Every test here starts homes and servers of its own (an embedded server, `nexusflow
server`, a night of runs) and needs no session server: marked ``slow`` here, once."""

import pytest
from folders import mark_folder


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, pytest.mark.slow)
