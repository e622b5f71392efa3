"""Every test here starts PostgreSQL, an S3 server or several worker processes: marked
``topology`` here, once."""

import pytest
from folders import mark_folder


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, pytest.mark.topology)
