"""How each kind of step runs as a Prefect task: where its record is stored, how it is
serialized, how long it may take, and (for model turns only) how often it is retried.

Retries are offered where they are safe: a model turn has no side effect (a retry costs one
more launch), so Prefect may run it again; a tool call may have one, so its retries belong to
``ToolPolicy`` (only for errors that say nothing happened); a wait asks a person.
"""

from __future__ import annotations

from typing import Any

from prefect.filesystems import WritableFileSystem
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import tool_steps_take_no_retries, wait_steps_take_no_retries


class StepOptions(BaseModel):
    """Prefect task options for one kind of step."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True, extra="forbid")

    result_storage: WritableFileSystem | str | None = Field(
        default=None,
        description="A saved storage block (or its slug); None: Prefect's configured result storage, "
        "written atomically when it is the local file system.",
    )
    result_serializer: str = "json"
    timeout_seconds: float | None = Field(default=None, gt=0)
    retries: int = Field(default=0, ge=0)
    retry_delay_seconds: float = Field(default=0.0, ge=0)

    def task_options(self, storage: WritableFileSystem | str) -> dict[str, Any]:
        return {
            "result_storage": self.result_storage or storage,
            "result_serializer": self.result_serializer,
            "timeout_seconds": self.timeout_seconds,
            "retries": self.retries,
            "retry_delay_seconds": self.retry_delay_seconds,
        }


class TaskConfig(BaseModel):
    """Per-kind task options of a client's runs (``create_*_client(task_config=...)``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn: StepOptions = StepOptions()
    tool: StepOptions = StepOptions()
    wait: StepOptions = Field(default=StepOptions(), description="A suspension and its wait.")

    @model_validator(mode="after")
    def _retries_where_safe(self) -> TaskConfig:
        if self.tool.retries:
            raise tool_steps_take_no_retries()
        if self.wait.retries:
            raise wait_steps_take_no_retries()
        return self
