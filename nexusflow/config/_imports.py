"""Tools named in text (``package.module:name`` or ``path/to/file.py:name``), as on the
command line and in deployment parameters."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .._support.digest import digest
from ..errors import ToolkitError
from .errors import (
    output_not_importable,
    tools_import_failed,
    tools_no_attribute,
    tools_no_such_file,
    tools_spec_malformed,
)


def _import_file(name: str) -> ModuleType:
    """A file's module, run once per process and kept in ``sys.modules`` under a name of its
    own (a ``math.py`` must not replace ``math``): dataclasses and postponed annotations
    look their module up there, and a file named twice (tools, output type) is one module."""
    path = Path(name).resolve()
    module_name = f"_nexusflow_file_{path.stem}_{digest(str(path))}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None or not path.is_file():
        raise tools_no_such_file(name)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def import_target(spec: str) -> Any:
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise tools_spec_malformed(spec)
    try:
        if module_name.endswith(".py"):
            module = _import_file(module_name)
        else:
            if str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_name)
    except ToolkitError:
        raise
    except Exception as exc:
        raise tools_import_failed(module_name, exc) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise tools_no_attribute(module_name, attribute) from None


def import_tools(specs: Sequence[str]) -> list[Any]:
    """Each spec names a tool, a function or a list of them."""
    tools: list[Any] = []
    for spec in specs:
        target = import_target(spec)
        tools.extend(target if isinstance(target, list | tuple) else [target])
    return tools


def import_output_type(spec: str | None) -> Any:
    """The type a ``module:Name`` (or ``file.py:Name``) names; None for plain text. Whether
    pydantic can use it is ``OutputSpec.of``'s to say."""
    if spec is None:
        return None
    try:
        return import_target(spec)
    except ToolkitError as exc:
        raise output_not_importable(spec, exc) from exc
