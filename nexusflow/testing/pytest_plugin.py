"""The pytest plugin nexusflow ships: ``@pytest.mark.nexusflow_cassette`` and the
``nexusflow_cassette`` fixture. Installing nexusflow registers it (a ``pytest11`` entry
point); with plugin autoloading off, load it with ``-p nexusflow.testing.pytest_plugin``.

A marked test records the launches of every CLI client it opens to
``cassettes/<module>/<test>.json`` beside the test file, or replays them from there with no
process started (see ``Cassette`` for the modes). Light to load: nothing of nexusflow is
imported until a test asks for a cassette."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..transports.cassette import Cassette

MARKER = "nexusflow_cassette"
_OPTIONS = ("path", "mode")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(path=None, mode=None): record the test's agent CLI launches to a cassette, or replay them"
        " (mode record, replay or auto; default NEXUSFLOW_CASSETTE_MODE, else auto)",
    )


def cassette_path(request: pytest.FixtureRequest) -> Path:
    """``cassettes/<module>/<test>.json`` beside the test file; a class and parameters are
    part of the test's name."""
    test = request.node.nodeid.split("::", 1)[-1]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", test.replace("::", ".")).strip("-")
    return request.path.parent / "cassettes" / request.path.stem / f"{name}.json"


@pytest.fixture
def nexusflow_cassette(request: pytest.FixtureRequest) -> Iterator[Cassette]:
    """The test's cassette, in use by every CLI client the test opens without one of its
    own. The marker may give ``path`` (relative to the test file) and ``mode``."""
    from ..config.errors import option_unknown
    from ..transports.cassette import Cassette

    marker = request.node.get_closest_marker(MARKER)
    options = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        options.setdefault("path", marker.args[0])
    for option in options:
        if option not in _OPTIONS:
            raise option_unknown(f"@pytest.mark.{MARKER}", option, list(_OPTIONS))
    given = options.get("path")
    path = request.path.parent / given if given is not None else cassette_path(request)
    tmp_path: Path = request.getfixturevalue("tmp_path")
    cassette = Cassette(path, options.get("mode"), places={"<tmp_path>": tmp_path})
    with cassette.used():
        yield cassette
    cassette.save()  # a recorded test that launched nothing still leaves its cassette


@pytest.fixture(autouse=True)
def _nexusflow_cassette_marker(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker(MARKER) is not None:
        request.getfixturevalue(MARKER)
