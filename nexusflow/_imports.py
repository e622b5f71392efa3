"""Tools named in text (``package.module:name`` or ``path/to/file.py:name``), as on the
command line and in deployment parameters."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import ToolkitError


def import_target(spec: str) -> Any:
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise ToolkitError(f"tools: expected module:function or file.py:function, got {spec!r}")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            loader_spec = importlib.util.spec_from_file_location(path.stem, path)
            if loader_spec is None or loader_spec.loader is None or not path.is_file():
                raise ToolkitError(f"tools: no such file: {module_name}")
            module = importlib.util.module_from_spec(loader_spec)
            loader_spec.loader.exec_module(module)
        else:
            if str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_name)
    except ToolkitError:
        raise
    except Exception as exc:
        raise ToolkitError(f"tools: cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ToolkitError(f"tools: {module_name} has no {attribute!r}") from None


def import_tools(specs: Sequence[str]) -> list[Any]:
    """Each spec names a tool, a function or a list of them."""
    tools: list[Any] = []
    for spec in specs:
        target = import_target(spec)
        tools.extend(target if isinstance(target, list | tuple) else [target])
    return tools
