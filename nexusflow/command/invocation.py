"""How ``nexusflow run`` started a session, kept in Prefect's result storage beside the
session's other records: ``--session ID --answer`` goes on with the same tools, model and
limits (and output type) from any machine that sees that storage, without the user typing
them again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, Field

from .._prefect.storage import read_record, write_record
from ..transports.choice import Transport
from ..transports.oneshot import CliStyles


class Invocation(BaseModel):
    """The flags of ``nexusflow run`` that shape a session (not the prompt, not the answer):
    the table's stored ones (``nexusflow.config.run_flags``). A flag not given is ``None``:
    its ``NEXUSFLOW_*`` setting, else its default, applies when the client is made. A
    session stored before the flags took their one spelling reads as it was written."""

    tools: list[str] = Field(default_factory=list)
    mcp_config: str | None = Field(default=None, validation_alias=AliasChoices("mcp_config", "mcp"))
    skills_dir: str | None = Field(default=None, validation_alias=AliasChoices("skills_dir", "skills"))
    style: CliStyles | None = None
    style_file: str | None = None
    command: str | None = None
    model: str | None = None
    transport: Transport = Transport.AUTO
    acp_command: str | None = None
    system_prompt: str | None = Field(default=None, validation_alias=AliasChoices("system_prompt", "system"))
    max_turns: int | None = None
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    timeout: float | None = None
    script: str | None = None
    limit: str | None = None
    max_concurrent: int | None = None
    per_minute: float | None = None
    output_type: str | None = None

    def over(self, given: dict[str, Any]) -> Invocation:
        """This invocation with the flags given now in place of the stored ones."""
        return self.model_validate({**self.model_dump(), **given})


def absolute(path: Path | str | None) -> str | None:
    """Paths are stored absolute: the answer may come from another directory. Symlinks are
    kept: a venv's ``bin/python`` is a link, and resolving it would leave the venv."""
    return None if path is None else os.path.abspath(Path(path).expanduser())


def absolute_tool(spec: str) -> str:
    """``file.py:name`` with an absolute file; ``module:name`` as given."""
    module, sep, name = spec.rpartition(":")
    return f"{absolute(module)}:{name}" if sep and module.endswith(".py") else spec


def absolute_command(command: str | None) -> str | None:
    """A command given as a path is made absolute; a bare name stays a PATH lookup."""
    return absolute(command) if command is not None and "/" in command else command


async def save_invocation(session_id: str, invocation: Invocation) -> None:
    await write_record(invocation, "sessions", session_id, "invocation.json")


async def load_invocation(session_id: str) -> Invocation | None:
    return await read_record(Invocation, "sessions", session_id, "invocation.json")
