"""A tier folder's marker, applied once by its conftest to every test collected under it."""

from pathlib import Path

import pytest


def mark_folder(items: list[pytest.Item], conftest: str, *marks: pytest.MarkDecorator) -> None:
    """Called from the folder's ``pytest_collection_modifyitems`` (``tryfirst``: before ``-m``
    deselects by these marks)."""
    folder = Path(conftest).parent
    for item in items:
        if item.path.is_relative_to(folder):
            for mark in marks:
                item.add_marker(mark)
