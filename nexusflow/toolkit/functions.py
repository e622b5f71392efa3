"""Python functions as tools: ``@tool`` builds the schema from type hints and the docstring."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any, overload

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import PydanticSerializationError, to_json, to_jsonable_python

from .._support.secrets import get_logger
from ..config._checks import function, optional_text
from ..messages import FunctionSpec, ToolResult, ToolSpec, repair_json
from ..state.suspension import Suspension
from .errors import tool_error_arguments, tool_signature_unreadable, tool_takes_variadic_arguments

logger = get_logger("nexusflow.toolkit")

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its summary and its ``Args:`` descriptions."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section, current = header.group(1), None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            match = _ARG_LINE.match(line)
            if match and not line.startswith((" " * 8, "\t\t")):
                current = match.group(1).lstrip("*")
                params[current] = match.group(2).strip()
            elif current and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), params


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return to_json(value, fallback=str).decode()
    except PydanticSerializationError:
        # A lone surrogate somewhere inside: repair it rather than report an encoding error.
        return to_json(repair_json(to_jsonable_python(value, fallback=str))).decode()


class FunctionTool:
    """A Python function the model can call; sync functions run in a worker thread so that
    the calls of one turn really run side by side."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        summary, param_docs = _parse_docstring(fn.__doc__)
        self.description = description if description is not None else summary
        self._is_async = inspect.iscoroutinefunction(inspect.unwrap(fn))
        self._arguments = self._arguments_model(fn, param_docs)
        schema = self._arguments.model_json_schema()
        schema.pop("title", None)
        self.spec = ToolSpec(function=FunctionSpec(name=self.name, description=self.description, parameters=schema))
        functools.update_wrapper(self, fn)

    def _arguments_model(self, fn: Callable[..., Any], param_docs: dict[str, str]) -> type[BaseModel]:
        try:
            signature = inspect.signature(fn, eval_str=True)
        except (NameError, TypeError) as exc:
            raise tool_signature_unreadable(self.name, exc) from exc
        fields: dict[str, Any] = {}
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise tool_takes_variadic_arguments(self.name)
            annotation = Any if param.annotation is param.empty else param.annotation
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (annotation, Field(default, description=param_docs.get(param.name)))
        return create_model(
            f"{self.name}_arguments",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
            **fields,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calling the decorated function directly still works, as before decoration."""
        return self.fn(*args, **kwargs)

    async def _in_thread(self, kwargs: dict[str, Any]) -> Any:
        """A sync function in a worker thread that a timeout (or a stopped run) abandons: a
        thread cannot be stopped, and waiting for it would make the timeout a lie."""
        try:
            return await anyio.to_thread.run_sync(functools.partial(self.fn, **kwargs), abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            logger.warning(
                'tool "%s" was cancelled (timed out or its run stopped) while running in a worker thread; a thread'
                " cannot be killed, so the function keeps running in the background and its late result is discarded",
                self.name,
            )
            raise

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        """Invalid arguments are an error result; an exception the function raises
        propagates (the toolkit applies the policy's retries, then reports it)."""
        try:
            validated = self._arguments.model_validate(arguments)
        except ValidationError as exc:
            detail = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()
            )
            return ToolResult(content=tool_error_arguments(self.name, detail), is_error=True)
        kwargs = {key: getattr(validated, key) for key in type(validated).model_fields}
        if self._is_async:
            value = await self.fn(**kwargs)
        else:
            value = await self._in_thread(kwargs)
        if isinstance(value, Suspension):
            return ToolResult(content=f"pending: {value.request.prompt}", pending=value.request)
        return ToolResult(content=_render(value))


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, description: str | None = None
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a function (sync or async) a tool: ``@tool`` or ``@tool(name=..., description=...)``."""
    optional_text("tool", "name", name)
    optional_text("tool", "description", description)
    if fn is not None:
        return FunctionTool(function("tool", "the decorated object", fn), name=name, description=description)
    return lambda f: FunctionTool(function("tool", "the decorated object", f), name=name, description=description)
