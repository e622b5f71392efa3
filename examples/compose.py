"""Agents inside your own flow: fan out over topics, then feed the answers downstream.

    python examples/compose.py

Each ``client.run`` shows in the Prefect UI as an ``agent_run`` subflow of ``research``,
with its turns and tool calls as task runs.
"""

import anyio
from prefect import flow, task

from nexusflow import choose_server, create_in_process_client
from nexusflow.testing import ScriptedModel


@task
def publish(summaries: list[str]) -> str:
    return "\n".join(f"- {line}" for line in summaries)


@flow(name="research")
async def research(topics: list[str]) -> str:
    async def summarize(topic: str) -> str:
        client = create_in_process_client(ScriptedModel([f"{topic}: three key facts, summarized."]))
        result = await client.run(f"Summarize {topic} in one line.")
        return result.text or f"{topic}: failed ({result.error})"

    summaries: list[str] = [""] * len(topics)

    async def one(index: int, topic: str) -> None:
        summaries[index] = await summarize(topic)

    async with anyio.create_task_group() as group:
        for index, topic in enumerate(topics):
            group.start_soon(one, index, topic)
    return publish(summaries)


if __name__ == "__main__":
    choose_server()  # before the flow starts its own: the home's `nexusflow server` if one runs
    print(anyio.run(research, ["Prefect", "MCP", "ACP"]))
