"""Typed output: the JSON schema a run's final answer must match, in the shape the model is
sent it (``response_format``), and the answer validated against it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, get_origin

from pydantic import PydanticUserError, TypeAdapter, ValidationError

from .errors import output_unusable

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL)
_QUALIFIER = re.compile(r"(?<![\w.'\"])[A-Za-z_][\w.]*\.(?=[A-Za-z_])")
_SHOWN_ERRORS = 3
"""A complaint quotes this many of pydantic's errors: enough to fix, short enough to read."""


def type_name(output_type: Any) -> str:
    """``Report`` for a class, ``dict[str, Report]`` for a generic alias (no module paths)."""
    name = getattr(output_type, "__name__", None)
    if get_origin(output_type) is None and isinstance(name, str):
        return name
    return _QUALIFIER.sub("", repr(output_type))


def unfenced(text: str) -> str:
    """The answer without the ```json fence a model may put around it."""
    stripped = text.strip()
    found = _FENCE.fullmatch(stripped)
    return found.group(1) if found else stripped


def complaint(exc: ValidationError) -> str:
    """Pydantic's first errors, one ``where: what`` each (no input, no URL: the model wrote the input)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    shown = [
        f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" if error["loc"] else error["msg"]
        for error in errors[:_SHOWN_ERRORS]
    ]
    more = len(errors) - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more else "")


@dataclass(frozen=True)
class OutputSpec:
    """A run's output type, ready to send and to check."""

    name: str
    adapter: TypeAdapter[Any]
    schema: dict[str, Any]

    @classmethod
    def of(cls, output_type: Any) -> OutputSpec | None:
        """None for plain text (no type, or ``str``); raises ``OutputError`` for a type
        pydantic cannot validate or describe as a JSON schema."""
        if output_type is None or output_type is str:
            return None
        name = type_name(output_type)
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(output_type)
            schema = adapter.json_schema()
        except (PydanticUserError, TypeError) as exc:
            raise output_unusable(name, str(exc).splitlines()[0]) from exc
        return cls(name=name, adapter=adapter, schema=schema)

    @property
    def response_format(self) -> dict[str, Any]:
        """OpenAI's shape; ``strict`` off, since a strict schema forbids much that pydantic allows."""
        schema_name = re.sub(r"[^A-Za-z0-9_-]+", "_", self.name).strip("_")[:64] or "output"
        return {"type": "json_schema", "json_schema": {"name": schema_name, "schema": self.schema, "strict": False}}

    def validate(self, text: str) -> Any:
        """The answer as the output type; raises ``ValidationError``."""
        return self.adapter.validate_json(unfenced(text))

    def repair(self, errors: str) -> str:
        """What the model reads when its final answer did not validate."""
        return (
            f"Your final answer does not match the required output type {self.name}: {errors}. "
            "Answer again with only JSON that matches the schema."
        )
