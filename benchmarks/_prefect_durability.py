"""pydantic-ai's ``PrefectDurability`` capability (its current Prefect integration; PrefectAgent
is deprecated for it) on the benchmarks' workload: an instant ``FunctionModel`` that calls one
instant tool on every turn but the last, then answers "done". The capability makes each model
request and each tool call a task run (persisted results, its default cache policy); the run
itself is a ``@flow`` of the caller's, as pydantic-ai's migration note says (``agent.run()``
inside a flow). Needs the ``bench`` extra (pydantic-ai is not a dependency)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


def durable_agent(target: dict[str, int], name: str, on_model_call: Callable[[], None] | None = None) -> Any:
    """The workload's agent (``_prefect_agent.workload_agent``) with ``PrefectDurability``."""
    from _prefect_agent import workload_agent
    from pydantic_ai.durable_exec.prefect import PrefectDurability

    return workload_agent(target, name, on_model_call, capabilities=[PrefectDurability()])


def runner(name: str, on_model_call: Callable[[], None] | None = None) -> Callable[[int], Awaitable[None]]:
    """``run(turns)``: one ``turns``-turn run of one durable agent in a flow of its own (no
    request limit: pydantic-ai stops at 50 by default); raises if the answer is wrong."""
    from prefect import flow
    from pydantic_ai.usage import UsageLimits

    target = {"turns": 1}
    agent = durable_agent(target, name, on_model_call)
    limits = UsageLimits(request_limit=None)

    @flow(name=f"{name}_durable_run")
    async def durable_run(prompt: str) -> str:
        result = await agent.run(prompt, usage_limits=limits)
        return str(result.output)

    async def run(turns: int) -> None:
        target["turns"] = turns
        output = await durable_run("bench")
        if output != "done":
            raise RuntimeError(f"PrefectDurability: wrong result {output!r}")

    return run
