"""The toolkit's words: a tool, ``mcp.json`` or skills folder refused, and the error results
a model reads when a tool call goes wrong.

``tool_error_*`` return text, not exceptions: a bad tool call becomes a result the model
reads and answers, and never crashes a run. ``tool_error_arguments`` is shared with
``nexusflow.compose``, a floor above.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .._support.wording import problems
from ..errors import McpServerError, ToolkitError, describe

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import ValidationError


def tool_signature_unreadable(name: str, exc: BaseException) -> ToolkitError:
    return ToolkitError(f'tool "{name}": cannot read its signature: {exc}')


def tool_takes_variadic_arguments(name: str) -> ToolkitError:
    return ToolkitError(f'tool "{name}": *args and **kwargs cannot be described to a model')


def toolkit_duplicate_tool(name: str, first: str, second: str) -> ToolkitError:
    """``first`` and ``second`` say where each tool comes from (an MCP server, a Python tool)."""
    return ToolkitError(
        f'toolkit: two tools are named "{name}" ({first} and {second});'
        ' rename one, or give an MCP server a "toolPrefix"'
    )


def mcp_config_unreadable(where: str, exc: OSError) -> ToolkitError:
    return ToolkitError(f"mcp: cannot read {where}: {exc.strerror or exc}")


def mcp_config_not_json(where: str, exc: json.JSONDecodeError) -> ToolkitError:
    return ToolkitError(f"mcp: {where} is not JSON: {exc.msg} at line {exc.lineno}")


def mcp_config_invalid(where: str, exc: ValidationError) -> ToolkitError:
    """Names the offending keys, never a value: a header or env value may be a secret."""
    return ToolkitError(f"mcp: invalid {where}: {problems(exc, root='')}")


def skills_no_front_matter(path: Path) -> ToolkitError:
    return ToolkitError(f"skills: {path}: no front matter (a '---' block with name and description)")


def skills_front_matter_unclosed(path: Path) -> ToolkitError:
    return ToolkitError(f"skills: {path}: front matter is not closed by '---'")


def skills_front_matter_not_yaml(path: Path, exc: BaseException) -> ToolkitError:
    return ToolkitError(f"skills: {path}: front matter is not YAML: {exc}")


def skills_front_matter_not_mapping(path: Path) -> ToolkitError:
    return ToolkitError(f"skills: {path}: front matter must be a mapping")


def skills_front_matter_incomplete(path: Path, exc: ValidationError) -> ToolkitError:
    missing = ", ".join(str(err["loc"][0]) for err in exc.errors())
    return ToolkitError(f"skills: {path}: front matter needs a string {missing}")


def skills_not_a_directory(root: Path) -> ToolkitError:
    return ToolkitError(f"skills: {root} is not a directory")


def skills_duplicate(name: str, first: Path, second: Path) -> ToolkitError:
    return ToolkitError(f'skills: two skills are named "{name}": {first} and {second}')


def mcp_server_failed(server: str, exc: BaseException, startup_timeout: float, stderr: str) -> McpServerError:
    """``stderr``: the end of what a stdio server printed, empty when it printed nothing."""
    reason = (
        f"no answer within startupTimeout ({startup_timeout:g}s)" if isinstance(exc, TimeoutError) else describe(exc)
    )
    if stderr:
        reason = f"{reason}; its stderr ends with:\n{stderr}"
    return McpServerError(server, reason)


def tool_error_unknown(name: str, known: list[str]) -> str:
    listed = ", ".join(sorted(known)) or "none"
    return f'error: unknown tool "{name}" (available: {listed})'


def tool_error_arguments(name: str, detail: str) -> str:
    return f'error: invalid arguments for tool "{name}": {detail}'


def tool_error_timed_out(name: str, seconds: float) -> str:
    return f'error: tool "{name}" timed out after {seconds:g}s'


def tool_error_raised(name: str, exc: BaseException) -> str:
    return f'error: tool "{name}" raised {type(exc).__name__}: {exc}'
