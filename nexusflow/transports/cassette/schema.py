"""The cassette file: stable, readable JSON with a version, meant to be committed beside the
test that recorded it. Fields keep their order and the request keeps its own key order, so a
recording made again of the same run changes only what changed.

Version 2 adds exported launches (``Launch.reply``: a session's turn as nexusflow parsed
it, see ``nexusflow.testing.export_cassette``). A file is written in the lowest version that
holds what it holds, so a recording stays version 1, byte for byte; a nexusflow that reads
only version 1 refuses an export by its version instead of by a field it never heard of.

Version 3 adds ACP sessions (``acp``): the JSON-RPC conversation of each, both ways, in the
order it happened, and the MCP tool calls the agent made to the served toolkit between its
messages. Only a file holding one is written as version 3."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from ...messages import ModelReply
from ..errors import (
    cassette_acp_before_version_3,
    cassette_acp_event_mixed,
    cassette_export_in_version_1,
    cassette_invalid,
    cassette_launch_mixed,
    cassette_not_json,
    cassette_reply_invalid,
    cassette_unreadable,
    cassette_version,
)

VERSION: Literal[3] = 3
"""The newest version this nexusflow writes."""
VERSIONS = (1, 2, 3)
"""The versions it reads."""


def _without(data: dict[str, Any], *names: str) -> dict[str, Any]:
    """``data`` without those of ``names`` whose value is None: a field a kind of launch never
    has is left out, and a version 1 recording is written as it always was."""
    return {key: value for key, value in data.items() if key not in names or value is not None}


class Asked(BaseModel):
    """What one launch asked, normalised: what a replay matches on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: list[str] | None = Field(
        default=None,
        description="The binary's name and its arguments; {{prompt}}, {{file}} and {{out}} stand for the"
        " prompt and the temporary files, which change every launch. None in an exported launch.",
    )
    prompt: str | None = Field(
        default=None, description="The envelope's instructions, before the request. None in an exported launch."
    )
    request: dict[str, Any] = Field(description="The request body, as sent.")
    repair: str | None = Field(default=None, description="The complaint a repair launch appended, if any.")

    @model_serializer(mode="wrap")
    def _kept(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without(handler(self), "argv", "prompt")


class Answer(BaseModel):
    """What the CLI gave back. Text that is not UTF-8 is kept as hex and named in ``hex``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exit: int = 0
    stdout: str = ""
    stderr: str = ""
    file: str | None = Field(default=None, description="The answer file's content, when the CLI wrote one.")
    hex: list[Literal["stdout", "file"]] = Field(default_factory=list)
    failed: str | None = Field(default=None, description="The launch's own failure (a timeout, an output limit).")


class Launch(BaseModel):
    """A recorded launch holds the CLI's ``answer``. An exported one holds the ``reply``
    instead: a session's records keep the reply as the envelope parsed it, never the CLI's
    output, its argv or the envelope's instructions, so it is replayed above the process and
    the envelope, and matched by its request alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    turn: int | None = Field(description="The run's step that launched it (0 for the first turn).")
    launch: int = Field(default=1, description="1, then one more for each repair of the turn's reply.")
    asked: Asked
    answer: Answer | None = None
    reply: dict[str, Any] | None = Field(
        default=None, description="An exported turn's reply (a ModelReply), as nexusflow parsed it."
    )
    seconds: float = Field(description="How long the launch took when it was recorded.")

    @field_validator("reply")
    @classmethod
    def _a_reply(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                ModelReply.model_validate(value)
            except ValidationError as exc:
                raise cassette_reply_invalid(exc) from None
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Launch:
        recorded = self.asked.argv is not None and self.asked.prompt is not None
        if self.reply is None and (self.answer is None or not recorded):
            raise cassette_launch_mixed(exported=False)
        if self.reply is not None and (self.answer is not None or self.asked.argv is not None):
            raise cassette_launch_mixed(exported=True)
        return self

    @model_serializer(mode="wrap")
    def _kept(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without(handler(self), "answer", "reply")


class ToolUse(BaseModel):
    """One MCP tool call the agent made to the served toolkit: on replay it is made again,
    for real, and its result must equal this one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: str = Field(description="The tool's result as the agent received it, normalised.")
    is_error: bool = False


AcpEventKind = Literal["client", "agent", "raw", "tool", "ended"]
ACP_EVENT_KINDS: tuple[AcpEventKind, ...] = ("client", "agent", "raw", "tool", "ended")


class AcpEvent(BaseModel):
    """One step of an ACP session, exactly one of: a message our client sent (``client``,
    normalised: what a replay matches), a message the agent sent (``agent``: played back),
    a line from the agent that was no JSON object (``raw``), a call of the served toolkit
    (``tool``), or the agent's output ending before our client closed it (``ended``: how the
    agent ended, as our client told it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    turn: int | None = Field(description="The run's step it happened in; None outside a turn (the handshake).")
    client: dict[str, Any] | None = None
    agent: dict[str, Any] | None = None
    raw: str | None = None
    tool: ToolUse | None = None
    ended: str | None = None

    @property
    def kind(self) -> AcpEventKind:
        return next(kind for kind in ACP_EVENT_KINDS if getattr(self, kind) is not None)

    @model_validator(mode="after")
    def _one_kind(self) -> AcpEvent:
        if sum(getattr(self, kind) is not None for kind in ACP_EVENT_KINDS) != 1:
            raise cassette_acp_event_mixed()
        return self

    @model_serializer(mode="wrap")
    def _kept(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without(handler(self), *ACP_EVENT_KINDS)


class AcpSession(BaseModel):
    """One ACP agent process's conversation, from ``initialize`` to its end."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    style: str = Field(description="The client's style: a replay of another style's client never matches it.")
    agent: str = Field(description="The agent command's name (its folder left out).")
    events: list[AcpEvent] = Field(default_factory=list)


class CassetteFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1, 2, 3] = 1
    launches: list[Launch] = Field(default_factory=list)
    acp: list[AcpSession] = Field(default_factory=list)

    @model_validator(mode="after")
    def _exports_need_2(self) -> CassetteFile:
        if self.version == 1 and any(launch.reply is not None for launch in self.launches):
            raise cassette_export_in_version_1()
        if self.version < 3 and self.acp:
            raise cassette_acp_before_version_3()
        return self

    @model_serializer(mode="wrap")
    def _kept(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        return data if self.acp else {key: value for key, value in data.items() if key != "acp"}

    @property
    def lowest_version(self) -> Literal[1, 2, 3]:
        """The lowest version that holds what the file holds."""
        if self.acp:
            return 3
        return 2 if any(launch.reply is not None for launch in self.launches) else 1


def read(path: Path) -> CassetteFile:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise cassette_not_json(path, exc) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise cassette_unreadable(path, exc) from exc
    if not isinstance(data, dict) or data.get("version") not in VERSIONS:
        raise cassette_version(path, data.get("version") if isinstance(data, dict) else None, VERSIONS)
    try:
        return CassetteFile.model_validate(data)
    except ValidationError as exc:
        raise cassette_invalid(path, exc) from exc


def text(cassette: CassetteFile) -> str:
    """Two-space indented JSON, non-ASCII kept as is, one newline at the end; in the lowest
    version that holds the launches and sessions."""
    data = cassette.model_copy(update={"version": cassette.lowest_version}).model_dump(mode="json")
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write(path: Path, content: str) -> None:
    """Atomically: a run killed mid-write leaves the previous file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
