"""Test an agent flow with your own installed agent CLI, without spending a token.

    python examples/scripted_cli.py claude /path/to/claude

The CLI talks to a scripted model server on 127.0.0.1 instead of its provider, with a
temporary home (your logins and settings are not touched): the first reply calls the ``add``
tool through the envelope, the second is the final answer.
"""

import sys
import tempfile
from pathlib import Path

import anyio

from nexusflow import CliStyles, Toolkit, Transport, create_cli_client, tool
from nexusflow.testing import ScriptedModelServer


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def main(style_name: str, command: str) -> None:
    style = CliStyles.parse(style_name)
    model = "scripted/scripted-model" if style is CliStyles.OPENCODE else None
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        async with ScriptedModelServer(
            [
                '{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}',
                '{"content": "2 + 3 = 5"}',
            ]
        ) as server:
            client = create_cli_client(
                style, command, model, transport=Transport.CLI, env=server.environment(style, home), cwd=home
            )
            async with await Toolkit.load(tools=[add]) as toolkit:
                result = await client.run("Add 2 and 3.", toolkit)
            tool_result = next(m.content for m in result.messages if m.role == "tool")
    print(result.status, result.text, f"(the tool returned {tool_result}; {len(server.turns())} model turns)")


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:3])
