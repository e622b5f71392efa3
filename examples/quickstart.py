"""A tool-calling agent run as a Prefect flow, on a model you write yourself.

    python examples/quickstart.py

Swap the generate function for an agent CLI (``create_cli_client``) without touching
anything else: tools, hooks and durability stay the same.
"""

import anyio

from nexusflow import ModelRequest, Toolkit, create_in_process_client, tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


def generate(request: ModelRequest):
    """A tiny rule-based model: ask for the tool once, then answer with its result."""
    results = [m.content for m in request.messages if m.role == "tool"]
    if not results:
        return {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}
    return f"2 + 3 = {results[0]}"


async def main() -> None:
    client = create_in_process_client(generate, system_prompt="Use tools for arithmetic.")
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client.run("What is 2 + 3? Use the add tool.", toolkit)
    print(result.status, result.text, f"(flow run {result.flow_run_id})")


if __name__ == "__main__":
    anyio.run(main)
