"""The options every client takes, whatever its transport: data the flow reads, below the
client so that flows and tasks never import the client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..messages import Answer, Request
from ..state.budget import Budget
from ..state.store import ConversationStore
from .hooks import AfterLlm, AfterTool, BeforeLlm, BeforeTool
from .policies import ToolPolicy
from .settings import (
    ARGUMENT_DEPTH,
    CLIENT_FIELDS,
    MOST_ARGUMENT_DEPTH,
    PARALLEL_TOOL_CALLS,
    TOOL_CALLS,
    TOOL_RESULT,
    OnQuota,
    environment_defaults,
)
from .subscription import SubscriptionLimit
from .task_config import TaskConfig

WaitFor = Callable[[Request], Awaitable[Answer]]
"""Resolves a suspended call's request: see ``nexusflow.config.waits`` for the built-in ones."""


class ClientOptions(BaseModel):
    """Options every client takes, whatever its transport."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", frozen=True)

    model: str | None = None
    system_prompt: str | None = None
    max_turns: int = Field(default=20, ge=1)
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        description="Dollars the run, its sub-agents and fan-out members may spend together, by the costs"
        " their turns report; the run stops before the next live turn once they reach it.",
    )
    max_tokens: int | None = Field(
        default=None, ge=1, description="Tokens (in + out) the run tree may spend together, as max_cost_usd."
    )
    before_llm: BeforeLlm | None = None
    after_llm: AfterLlm | None = None
    before_tool: BeforeTool | None = None
    after_tool: AfterTool | None = None
    wait_for: WaitFor | None = None
    policies: dict[str, ToolPolicy] = Field(default_factory=dict)
    conversation_store: ConversationStore | None = None
    task_config: TaskConfig = Field(default_factory=TaskConfig)
    subscription: SubscriptionLimit | None = None
    model_retries: int = Field(
        default=0,
        ge=0,
        description="Further attempts of a turn that failed with a TransientError (off by default).",
    )
    model_retry_wait: float = Field(
        default=1.0,
        ge=0,
        description="Seconds before the first retry; doubled each time, plus jitter, capped.",
    )
    output_type: Any = Field(
        default=None,
        description="What the final answer must be: a pydantic model or any type a TypeAdapter takes"
        " (None or str: plain text).",
    )
    output_retries: int = Field(
        default=2,
        ge=0,
        description="How many invalid final answers are sent back.",
    )
    on_quota: OnQuota = Field(
        default="fail",
        description="A spent quota window: fail the run, wait for the reset (a deployment's run gives back"
        " its worker), or ask the fallback clients in turn.",
    )
    fallback: tuple[Any, ...] = Field(
        default=(), description="Clients asked in order for a turn whose quota is spent (on_quota='fallback')."
    )
    quota_wait: float = Field(
        default=900.0, gt=0, description="Seconds to wait when the CLI does not say when its window resets."
    )
    max_quota_wait: float = Field(
        default=21600.0, gt=0, description="A reset further off than this many seconds fails the run instead."
    )
    max_tool_calls: int = Field(
        default=TOOL_CALLS,
        ge=1,
        description="Tool calls run per reply: each one past it is answered with an error the model reads, and"
        " starts no task run (a reply of 10,000 calls is not 10,000 tasks).",
    )
    max_parallel_tool_calls: int = Field(
        default=PARALLEL_TOOL_CALLS, ge=1, description="Tool calls of one reply that run at once; the rest wait."
    )
    max_tool_result: int = Field(
        default=TOOL_RESULT,
        ge=1,
        description="Bytes (UTF-8) a tool result may hold; a larger one is replaced by an error the model reads"
        " before it is stored (as a CLI's output is capped by max_output).",
    )
    max_argument_depth: int = Field(
        default=ARGUMENT_DEPTH,
        ge=1,
        le=MOST_ARGUMENT_DEPTH,
        description="How deep a tool call's arguments may nest; deeper ones are an error the model reads.",
    )

    @property
    def budget(self) -> Budget:
        """What the run tree may spend (unbounded without ``max_cost_usd`` or ``max_tokens``)."""
        return Budget(max_cost_usd=self.max_cost_usd, max_tokens=self.max_tokens)

    @model_validator(mode="before")
    @classmethod
    def _environment_fills_in(cls, data: Any) -> Any:
        """What the arguments leave out, the ``NEXUSFLOW_*`` variables set (one read a client)."""
        if isinstance(data, dict):
            return {**environment_defaults(CLIENT_FIELDS), **data}
        return data
