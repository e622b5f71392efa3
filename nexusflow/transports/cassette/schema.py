"""The cassette file: stable, readable JSON with a version, meant to be committed beside the
test that recorded it. Fields keep their order and the request keeps its own key order, so a
recording made again of the same run changes only what changed."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...errors import cassette_invalid, cassette_not_json, cassette_unreadable, cassette_version

VERSION: Literal[1] = 1


class Asked(BaseModel):
    """What one launch asked, normalised: what a replay matches on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: list[str] = Field(
        description="The binary's name and its arguments; {{prompt}}, {{file}} and {{out}} stand for the"
        " prompt and the temporary files, which change every launch."
    )
    prompt: str = Field(description="The envelope's instructions, before the request.")
    request: dict[str, Any] = Field(description="The request body, as sent.")
    repair: str | None = Field(default=None, description="The complaint a repair launch appended, if any.")


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
    model_config = ConfigDict(extra="forbid", frozen=True)

    turn: int | None = Field(description="The run's step that launched it (0 for the first turn).")
    launch: int = Field(default=1, description="1, then one more for each repair of the turn's reply.")
    asked: Asked
    answer: Answer
    seconds: float = Field(description="How long the launch took when it was recorded.")


class CassetteFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = VERSION
    launches: list[Launch] = Field(default_factory=list)


def read(path: Path) -> CassetteFile:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise cassette_not_json(path, exc) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise cassette_unreadable(path, exc) from exc
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise cassette_version(path, data.get("version") if isinstance(data, dict) else None, VERSION)
    try:
        return CassetteFile.model_validate(data)
    except ValidationError as exc:
        raise cassette_invalid(path, exc) from exc


def text(cassette: CassetteFile) -> str:
    """Two-space indented JSON, non-ASCII kept as is, one newline at the end."""
    return json.dumps(cassette.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


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
