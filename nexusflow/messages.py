"""The conversation in the OpenAI chat-completions shape, and the result of a run.

Everything that crosses a boundary (a transport, a persisted task result, a flow result)
is one of these models, so the shape is checked once, here, and so is the text (``Text``).
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Generic, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from typing_extensions import TypeVar

from .errors import arguments_not_an_object


def repair_text(text: str) -> str:
    """Replace each lone surrogate with U+FFFD (a split pair becomes its character again).

    A JSON escape such as ``"\\ud83d"`` decodes into a lone surrogate, which UTF-8 cannot
    encode: left in, it crashes the run wherever the text is next written (a CLI's stdin, a
    stored result) with an unrelated ``UnicodeEncodeError``. This runs on every message, so
    text without a surrogate returns itself at once: ASCII in O(1), the rest after one UTF-16
    encode, which is strict about surrogates and the cheapest scan for them."""
    if text.isascii():
        return text
    try:
        text.encode("utf-16-le")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


_BRACKET = re.compile(r'(?:[^"\[\]{}]++|"(?:[^"\\]++|\\.)*+"?)*+([\[\]{}])', re.DOTALL)
"""The next bracket outside a string; possessive, so a failed search costs one pass."""


def nests_deeper(text: str, depth: int) -> bool:
    """Whether the JSON value at the start of the text nests deeper than ``depth``: counts
    brackets outside strings until the value closes, so it costs little at any depth, where
    decoding a deep value (``json.loads``, then every recursive walk of it) would overflow
    Python's recursion limit."""
    level, position = 0, 0
    while match := _BRACKET.match(text, position):
        position = match.end()
        if match[1] in "[{":
            level += 1
            if level > depth:
                return True
        else:
            level -= 1
            if level <= 0:
                return False
    return False


def repair_json(value: Any) -> Any:
    """``repair_text`` on every string (keys too) of decoded JSON: tool arguments parsed from
    a pre-encoded string reach a tool without passing through a ``Text`` field."""
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, dict):
        return {repair_text(key) if isinstance(key, str) else key: repair_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [repair_json(item) for item in value]
    return value


Text = Annotated[str, AfterValidator(repair_text)]
"""A string that is always encodable as UTF-8: every text field that crosses a boundary."""


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _encode_arguments(value: Any) -> str:
    """Keep a pre-encoded string verbatim: re-encoding would change what the model wrote."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class FunctionCall(BaseModel):
    name: Text
    arguments: Text = "{}"

    @model_validator(mode="before")
    @classmethod
    def _encode(cls, data: Any) -> Any:
        if isinstance(data, dict) and "arguments" in data:
            data = {**data, "arguments": _encode_arguments(data["arguments"])}
        return data


class ToolCall(BaseModel):
    """One call the model asked for. Accepts the OpenAI shape or the flat
    ``{"id"?, "name", "arguments"}`` shape; a call without an id gets one."""

    id: Text = Field(default_factory=new_call_id)
    type: Literal["function"] = "function"
    function: FunctionCall

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        if isinstance(data, dict) and "function" not in data and "name" in data:
            data = dict(data)
            data["function"] = {"name": data.pop("name"), "arguments": data.pop("arguments", None)}
        if isinstance(data, dict) and data.get("id") is None:
            data = {k: v for k, v in data.items() if k != "id"}
        return data

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def arguments(self) -> str:
        return self.function.arguments

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as an object; raises ``ValueError`` when they are not a JSON object."""
        value = repair_json(json.loads(self.function.arguments or "{}"))
        if not isinstance(value, dict):
            raise arguments_not_an_object(value)
        return value


class SystemMessage(BaseModel):
    role: Literal["system"] = "system"
    content: Text


class UserMessage(BaseModel):
    role: Literal["user"] = "user"
    content: Text


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: Text | None = None
    tool_calls: list[ToolCall] | None = None


class ToolMessage(BaseModel):
    role: Literal["tool"] = "tool"
    tool_call_id: Text
    content: Text


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]


class FunctionSpec(BaseModel):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolSpec(BaseModel):
    """A tool as the model sees it (OpenAI ``tools[]`` entry)."""

    type: Literal["function"] = "function"
    function: FunctionSpec

    @property
    def name(self) -> str:
        return self.function.name


class ModelRequest(BaseModel):
    """One model turn's request. Keys we do not model (``tool_choice``, anything newer) are
    kept and passed through untouched."""

    model_config = ConfigDict(extra="allow")

    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    model: str | None = None
    response_format: dict[str, Any] | None = Field(
        default=None,
        description='The run\'s output type as OpenAI\'s {"type": "json_schema", "json_schema": {"schema": ...}}.',
    )

    @model_serializer(mode="wrap")
    def _without_absent_format(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An absent ``response_format`` is left out, not dumped as null: a run without an
        output type sends the body it always sent, and its turn keys stay what they were."""
        data: dict[str, Any] = handler(self)
        if data.get("response_format", ...) is None:
            del data["response_format"]
        return data

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema the final answer must match, when ``response_format`` gives one."""
        spec = (self.response_format or {}).get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return schema if isinstance(schema, dict) else None

    def body(self) -> dict[str, Any]:
        """The request body as JSON-ready data; extra keys are left exactly as given."""
        body = self.model_dump(mode="json")
        if body["model"] is None:
            del body["model"]
        for message in body["messages"]:
            if message.get("tool_calls", ...) is None:
                del message["tool_calls"]
        return body


class Usage(BaseModel):
    """What a turn (or, summed, a run) cost, as the model or CLI reported it.

    A figure nobody reported is ``None``, never 0: a CLI that states no cost has not
    said the turn was free. Added together, a figure is the sum of the turns that reported
    it, and ``None`` only when none did."""

    input_tokens: int | None = Field(default=None, validation_alias=AliasChoices("input_tokens", "prompt_tokens"))
    output_tokens: int | None = Field(default=None, validation_alias=AliasChoices("output_tokens", "completion_tokens"))
    cache_read_tokens: int | None = Field(default=None, description="Input tokens read from the provider's cache.")
    cache_write_tokens: int | None = Field(default=None, description="Input tokens written to the provider's cache.")
    cost_usd: float | None = Field(
        default=None, description="The cost in US dollars, where the CLI or agent states one."
    )
    model: str | None = Field(default=None, description="The model that answered, where it is reported.")

    @property
    def reported(self) -> bool:
        """Whether any token figure was reported."""
        return self.input_tokens is not None or self.output_tokens is not None

    @property
    def tokens(self) -> int | None:
        """Tokens in and out together, as reported; None when neither was."""
        return (self.input_tokens or 0) + (self.output_tokens or 0) if self.reported else None

    def __add__(self, other: Usage) -> Usage:
        def add(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else a + b

        return Usage(
            input_tokens=add(self.input_tokens, other.input_tokens),
            output_tokens=add(self.output_tokens, other.output_tokens),
            cache_read_tokens=add(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=add(self.cache_write_tokens, other.cache_write_tokens),
            cost_usd=add(self.cost_usd, other.cost_usd),
            model=self.model if self.model == other.model or other.model is None else other.model,
        )

    def shown(self) -> str:
        """One line for a log or a table; an unreported figure shows as ``?``."""

        def figure(value: int | None) -> str:
            return "?" if value is None else str(value)

        cost = "?" if self.cost_usd is None else f"{self.cost_usd:.6f}".rstrip("0").rstrip(".")
        return f"tokens {figure(self.input_tokens)} in / {figure(self.output_tokens)} out · cost ${cost}"


class TurnStats(BaseModel):
    """What producing one turn took, beyond tokens: process launches (a one-shot CLI
    launches once per attempt), repairs (attempts sent back with a complaint), and the
    tool calls an agent made itself during the turn (ACP)."""

    launches: int = 0
    repairs: int = 0
    model_retries: int = Field(default=0, description="Attempts that failed with a TransientError and were retried.")
    tool_calls: int = 0
    tool_errors: int = 0
    replayed_tool_calls: int = 0
    tool_seconds: float = 0.0
    suspensions: int = 0
    stop_reason: str | None = None
    streamed: bool = Field(default=False, description="The turn's text was already streamed as it came.")


class ModelReply(BaseModel):
    """What one model turn produced: a final answer (``content``) or tool calls."""

    content: Text | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stats: TurnStats = Field(default_factory=TurnStats)
    steps: list[Message] = Field(
        default_factory=list,
        description="Tool calls the agent made itself during the turn, with their results, in order.",
    )

    @model_validator(mode="before")
    @classmethod
    def _none_calls(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("tool_calls") is None and "tool_calls" in data:
            data = {k: v for k, v in data.items() if k != "tool_calls"}
        return data

    def as_message(self) -> AssistantMessage:
        return AssistantMessage(content=self.content, tool_calls=list(self.tool_calls) or None)


class Request(BaseModel):
    """What a suspended call asks for. ``tool`` and ``arguments`` are filled in by the run."""

    id: str = ""
    kind: Literal["approval", "input", "auth"] = "approval"
    prompt: Text
    url: str | None = None
    data: Any = None
    expires_at: datetime | None = None
    tool: str | None = None
    arguments: str | None = None


class Answer(BaseModel):
    """The answer to a ``Request``. ``reason="expired"`` tells the model it timed out."""

    id: str
    ok: bool
    data: Any = None
    reason: str | None = None


class ToolResult(BaseModel):
    """A tool's output as the model will read it; ``is_error`` marks a failure the model
    should see (unknown tool, invalid arguments, a raising tool). ``pending`` marks a call
    that suspended: it waits for an answer to that request."""

    content: Text
    is_error: bool = False
    pending: Request | None = None
    usage: Usage | None = None
    """What a sub-agent's run cost (an agent used as a tool), for the summary; never sent to the model."""


class RunMetrics(BaseModel):
    """What a run cost. Replayed steps cost nothing this time: their seconds, launches and
    repairs are not counted again."""

    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    replayed_turns: int = 0
    replayed_tool_calls: int = 0
    model_seconds: float = 0.0
    turn_seconds: list[float] = Field(default_factory=list, description="Each turn's model time; 0 when replayed.")
    tool_seconds: float = 0.0
    usage: Usage = Field(
        default_factory=Usage, description="What the turns run this time cost, summed from what each reported."
    )
    replayed_usage: Usage = Field(
        default_factory=Usage, description="What the replayed turns cost when they first ran: not spent again."
    )
    turns_without_usage: int = Field(default=0, description="Turns run this time that reported no token figure.")
    turns_without_cost: int = Field(default=0, description="Turns run this time that stated no cost.")
    models: list[str] = Field(
        default_factory=list, description="The models that answered, in the order they first did."
    )
    launches: int = 0
    repairs: int = 0
    model_retries: int = Field(default=0, description="Turn attempts retried after a TransientError (model_retries).")
    suspensions: int = 0
    stop_reasons: list[str] = Field(
        default_factory=list, description="Each turn's stop reason, where the agent gave one."
    )
    output_repairs: int = Field(
        default=0, description="Final answers sent back for not matching the output type (replayed ones too)."
    )

    @property
    def input_tokens(self) -> int | None:
        return self.usage.input_tokens

    @property
    def output_tokens(self) -> int | None:
        return self.usage.output_tokens

    @property
    def cost_usd(self) -> float | None:
        return self.usage.cost_usd


OutputT = TypeVar("OutputT", default=Any)


class RunResult(BaseModel, Generic[OutputT]):
    """``text`` is the final answer as the model wrote it; ``output`` is that answer
    validated into the run's output type (None without one)."""

    status: Literal["completed", "pending", "failed"]
    text: Text | None = None
    output: OutputT | None = None
    messages: list[Message] = Field(default_factory=list)
    metrics: RunMetrics = Field(default_factory=RunMetrics)
    session_id: str
    flow_run_id: str | None = None
    error: Text | None = None
    error_type: str | None = Field(
        default=None,
        description="The class of the error that failed the run (``MaxTurnsError``, ``ToolError``...);"
        " ``PrefectApiError`` is the Prefect API's passing trouble, after which ``Client.run`` starts the run again.",
    )
    request: Request | None = Field(default=None, description="What a pending run waits for.")
