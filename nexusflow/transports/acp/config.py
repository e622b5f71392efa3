"""How one ACP agent is launched and given its turns."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..errors import acp_cwd_outside
from ..oneshot.style import CliStyle


class AcpConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    style: CliStyle
    command: str
    model: str | None = None
    timeout: float = Field(default=300.0, gt=0, description="Seconds one turn (one session/prompt) may take.")
    env: dict[str, str] = Field(default_factory=dict)
    workspace: str
    cwd: str
    handshake_timeout: float = Field(default=60.0, gt=0)
    cancel_grace: float = Field(default=5.0, ge=0)
    quiet_period: float = Field(
        default=0.02,
        ge=0,
        description="Updates that follow a prompt's response still count until the agent has been quiet this long"
        " (at most ten times as long in all).",
    )
    retry_on: tuple[str, ...] = Field(
        default=(), description="Patterns of a turn's error message that make it a TransientError."
    )


def check_cwd(workspace: str | os.PathLike[str], cwd: str | os.PathLike[str]) -> tuple[str, str]:
    """Both as absolute resolved paths; the cwd must resolve (symlinks included) inside the workspace."""
    root = Path(workspace).resolve()
    where = Path(cwd).resolve()
    if not where.is_relative_to(root):
        raise acp_cwd_outside(cwd, where, root)
    return str(root), str(where)
