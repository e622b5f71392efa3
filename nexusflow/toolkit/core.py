"""The toolkit: every tool a run may call, whatever it came from, behind one ``call``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

import anyio
from tenacity import retry_if_exception_type, stop_after_attempt, wait_fixed

from .._support.retrying import Retrying
from .._support.secrets import get_logger
from ..config._checks import optional_text, sequence
from ..config.errors import argument_wrong
from ..config.policies import NO_POLICY, ToolPolicy
from ..messages import ToolResult, ToolSpec, repair_json
from ..state._position import CallPosition
from .errors import (
    tool_error_arguments,
    tool_error_raised,
    tool_error_timed_out,
    tool_error_unknown,
    toolkit_duplicate_tool,
)
from .functions import FunctionTool
from .mcp import McpTool, connect_server, load_mcp_config
from .skills import SkillTool, load_skills, skills_prompt

logger = get_logger("nexusflow.toolkit")


@runtime_checkable
class Tool(Protocol):
    """What the toolkit needs of a tool: a name, a spec for the model, and a call. A call
    reports bad arguments as an error result; anything else it raises is retried or
    reported by the toolkit, under the tool's policy."""

    name: str
    spec: ToolSpec

    async def call(self, arguments: dict[str, Any]) -> ToolResult: ...


@runtime_checkable
class NestedRunTool(Tool, Protocol):
    """A tool that starts a run of its own (an agent as a tool). A run's tool call tells it
    where the call sits, handed down with the call: the nested run's session id derives from
    that position, so resuming the caller resumes the nested run too."""

    async def call_at(self, arguments: dict[str, Any], position: CallPosition) -> ToolResult: ...


class _PolicyTimeout(TimeoutError):
    """The policy's timeout passed; a ``TimeoutError`` the tool raises itself is its own error.
    A ``TimeoutError`` still, so ``retry_on=(TimeoutError,)`` retries it."""


async def _with_policy(
    item: Tool, arguments: dict[str, Any], policy: ToolPolicy, position: CallPosition | None
) -> ToolResult:
    def call() -> Awaitable[ToolResult]:
        if position is not None and isinstance(item, NestedRunTool):
            return item.call_at(arguments, position)
        return item.call(arguments)

    async def attempt() -> ToolResult:
        if policy.timeout is None:
            return await call()
        result: ToolResult | None = None
        with anyio.move_on_after(policy.timeout) as scope:
            result = await call()
        if result is None:  # cancelled at the deadline
            raise _PolicyTimeout
        overrun = anyio.current_time() - scope.deadline
        if overrun >= 0:
            # An async tool that shields itself or blocks the event loop cannot be interrupted;
            # what it returns after its deadline is dropped, like a sync tool's late result.
            logger.warning(
                'tool "%s" ignored its %gs timeout and returned %.1fs late; its late result is discarded',
                item.name,
                policy.timeout,
                overrun,
            )
            raise _PolicyTimeout
        return result

    if policy.retries == 0:  # most calls: no retry object to build (benchmarks/README.md)
        return await attempt()
    retrying = Retrying(
        stop=stop_after_attempt(policy.retries + 1),
        wait=wait_fixed(policy.retry_delay),
        retry=retry_if_exception_type(policy.retry_on),
        reraise=True,
    )
    async for trial in retrying:
        with trial:
            return await attempt()
    raise AssertionError("tenacity ends with a result or the last error")


def _stops(exc: BaseException) -> bool:
    """Ctrl-C, an exit or a cancellation stops the run, even raised by a tool (alone or in a
    tool's own task group); anything else a tool raises is an error the model reads."""
    stopping = (KeyboardInterrupt, SystemExit, GeneratorExit, anyio.get_cancelled_exc_class())
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(stopping) is not None
    return isinstance(exc, stopping)


def _as_tool(index: int, item: object) -> Tool:
    if isinstance(item, Tool):
        return item
    if callable(item):
        return FunctionTool(item)
    raise argument_wrong("Toolkit", f"tools[{index}]", "a tool (a @tool function, a plain function or a Tool)", item)


def _origin(tool: Tool) -> str:
    if isinstance(tool, McpTool):
        return f'MCP server "{tool.server}"'
    if isinstance(tool, SkillTool):
        return "the skills folder"
    return "a Python tool"


class Toolkit:
    """The tools of a run. Build it with ``await Toolkit.load(...)`` and close it with
    ``async with`` or ``aclose()``: MCP servers stay connected until then."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = (), *, instructions: str | None = None) -> None:
        """Plain functions are wrapped as with ``@tool``; anything else that is not a tool is
        refused here, naming its place in ``tools``."""
        self._tools: dict[str, Tool] = {}
        self.instructions = optional_text("Toolkit", "instructions", instructions)
        self._stack = AsyncExitStack()
        for index, item in enumerate(sequence("Toolkit", "tools", tools)):
            self._add(_as_tool(index, item))

    def _add(self, item: Tool) -> None:
        if item.name in self._tools:
            raise toolkit_duplicate_tool(item.name, _origin(self._tools[item.name]), _origin(item))
        self._tools[item.name] = item

    @classmethod
    async def load(
        cls,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        mcp_config: str | Path | dict[str, Any] | None = None,
        skills_dir: str | Path | None = None,
    ) -> Self:
        """Python tools (plain functions are wrapped as with ``@tool``), the servers of an
        ``mcp.json`` (started now) and a skills folder. On any error, servers already
        started are closed before the error is raised."""
        if mcp_config is not None and not isinstance(mcp_config, str | Path | dict):
            raise argument_wrong("Toolkit.load", "mcp_config", "a path to an mcp.json or its dict", mcp_config)
        if skills_dir is not None and not isinstance(skills_dir, str | Path):
            raise argument_wrong("Toolkit.load", "skills_dir", "a path to a folder of skills", skills_dir)
        kit = cls(tools)
        try:
            if skills_dir is not None:
                skills = load_skills(skills_dir)
                if skills:
                    kit._add(SkillTool(skills))
                    kit.instructions = skills_prompt(skills)
            if mcp_config is not None:
                config = load_mcp_config(mcp_config)
                for name, server in config.mcp_servers.items():
                    if not server.disabled:
                        for mcp_tool in await connect_server(name, server, kit._stack):
                            kit._add(mcp_tool)
        except BaseException:
            await kit.aclose()
            raise
        return kit

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [item.spec for item in self._tools.values()]

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    async def call(
        self,
        name: str,
        arguments: str | dict[str, Any],
        policy: ToolPolicy = NO_POLICY,
        position: CallPosition | None = None,
    ) -> ToolResult:
        """Run one tool call under its policy's timeout and retries. Never raises for the
        model's mistakes: an unknown tool, arguments that are not a JSON object, a tool
        that raises or times out all come back as error results for the model to read;
        only ``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit`` and a cancellation go through.
        ``position`` is where a run's call sits, for a ``NestedRunTool``."""
        item = self._tools.get(name)
        if item is None:
            return ToolResult(content=tool_error_unknown(name, self.names), is_error=True)
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments or "{}")
            except json.JSONDecodeError as exc:
                return ToolResult(content=tool_error_arguments(name, f"not JSON: {exc.msg}"), is_error=True)
        else:
            parsed = arguments
        parsed = repair_json(parsed)
        if not isinstance(parsed, dict):
            return ToolResult(
                content=tool_error_arguments(name, f"expected a JSON object, got {type(parsed).__name__}"),
                is_error=True,
            )
        try:
            return await _with_policy(item, parsed, policy, position)
        except _PolicyTimeout:
            return ToolResult(content=tool_error_timed_out(name, policy.timeout or 0), is_error=True)
        except BaseException as exc:
            if _stops(exc):
                raise
            return ToolResult(content=tool_error_raised(name, exc), is_error=True)

    async def aclose(self) -> None:
        await self._stack.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
