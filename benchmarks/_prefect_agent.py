"""pydantic-ai's ``PrefectAgent`` on the benchmarks' workload: an instant ``FunctionModel``
that calls one instant tool on every turn but the last, then answers "done". Each model
request and each tool call is a task run of PrefectAgent's own (persisted results, its
default cache policy). Needs the ``bench`` extra (pydantic-ai is not a dependency)."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from typing import Any


def workload_agent(
    target: dict[str, int], name: str, on_model_call: Callable[[], None] | None = None, **options: Any
) -> Any:
    """The workload as a plain ``Agent`` (``options`` go to it: PrefectDurability's
    capability): ``target["turns"]`` model requests, read at every request, one tool call on
    each but the last. ``on_model_call`` is called at every model request (the benchmark's
    clock marks)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if on_model_call is not None:
            on_model_call()
        step = sum(isinstance(m, ModelResponse) for m in messages)
        if step < target["turns"] - 1:
            return ModelResponse(parts=[ToolCallPart("noop", {"step": step})])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond), name=name, **options)

    @agent.tool_plain(name="noop")
    async def noop(step: int) -> int:
        """Returns its argument."""
        return step

    return agent


def prefect_agent(target: dict[str, int], name: str, on_model_call: Callable[[], None] | None = None) -> Any:
    """The workload's agent wrapped in a PrefectAgent: one agent (one flow) for every run length."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PrefectAgent is deprecated for PrefectDurability
        from pydantic_ai.durable_exec.prefect import PrefectAgent

        return PrefectAgent(workload_agent(target, name, on_model_call))


def runner(name: str, on_model_call: Callable[[], None] | None = None) -> Callable[[int], Awaitable[None]]:
    """``run(turns)``: one ``turns``-turn run of one PrefectAgent (no request limit:
    pydantic-ai stops at 50 by default); raises if the answer is wrong."""
    from pydantic_ai.usage import UsageLimits

    target = {"turns": 1}
    agent = prefect_agent(target, name, on_model_call)
    limits = UsageLimits(request_limit=None)

    async def run(turns: int) -> None:
        target["turns"] = turns
        result = await agent.run("bench", usage_limits=limits)
        if result.output != "done":
            raise RuntimeError(f"PrefectAgent: wrong result {result.output!r}")

    return run
