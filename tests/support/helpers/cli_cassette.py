"""A real one-shot CLI's run on a cassette: the question, what the scripted model server
answers (a call of ``add``, then the answer), the transcript every CLI's run gives, and the run
itself. Shared by the live test that records the committed ``tests/cassettes/<cli>.json``
(tests/live/test_live_cassettes.py) and the replays of them
(tests/server/transports/test_recorded_cassettes.py)."""

from __future__ import annotations

import json
import uuid

from nexusflow import CliStyles, Toolkit, Transport, create_cli_client, tool
from nexusflow.messages import RunResult
from nexusflow.testing import Cassette
from nexusflow.testing.conformance import default_model
from nexusflow.transports.oneshot.style import CliStyle

from live_agents import ONE_SHOT

IDS = [style.value for style in ONE_SHOT]
QUESTION = "What is 2+3? Use the add tool."
CALL = json.dumps({"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}]})
ANSWER = json.dumps({"content": "It is 5."})
TRANSCRIPT = [
    ("user", QUESTION, []),
    ("assistant", None, [("add", '{"a": 2, "b": 3}')]),
    ("tool", "5", []),
    ("assistant", "It is 5.", []),
]
"""What every CLI's run says: the question, the call to ``add``, its result, the answer."""
AGENT_HOME = "<agent-home>"
"""The CLI's temporary home and working directory, named so in a cassette."""

ran: list[tuple[int, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append((a, b))
    return a + b


def transcript(result: RunResult) -> list[tuple[str, str | None, list[tuple[str, str]]]]:
    return [
        (
            m.role,
            getattr(m, "content", None),
            [(c.name, json.dumps(json.loads(c.arguments))) for c in getattr(m, "tool_calls", None) or []],
        )
        for m in result.messages
    ]


async def run(style: CliStyles | CliStyle, name: str, cassette: Cassette, **options: object) -> RunResult:
    model = default_model(CliStyles(style.name) if isinstance(style, CliStyle) else style)
    client = create_cli_client(style, name, model, transport=Transport.CLI, cassette=cassette, **options)
    ran.clear()
    async with await Toolkit.load(tools=[add]) as toolkit:
        return await client.run(QUESTION, toolkit, session_id=f"recorded-{uuid.uuid4().hex}")
