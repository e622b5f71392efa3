"""Every test here drives the Prefect UI in Debian's chromium: marked ``ui`` here, once."""

import pytest
from folders import mark_folder


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, pytest.mark.ui)
