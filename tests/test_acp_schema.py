"""What the ACP transport sends, checked against the official schema (the
``agent-client-protocol`` package's pydantic models), as the scripted agent received it.

Each payload must validate and dump back unchanged (``exclude_unset``, so defaults the
models add do not matter): a field the schema does not know would be dropped and show.
``session/set_model`` is not checked: the package has no model for it (it is not in the
stable schema).
"""

from typing import Any

import pytest
from acp import schema
from pydantic import BaseModel

from nexusflow import Toolkit, Transport, create_cli_client, tool
from nexusflow.transports.acp.permissions import CANCELLED, choose

pytestmark = pytest.mark.anyio


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def conforms(model: type[BaseModel], payload: dict[str, Any]) -> None:
    parsed = model.model_validate(payload)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == payload, model.__name__


async def run(agent, session_id, **options):
    client = create_cli_client(
        style=agent.style, command=agent.command, transport=Transport.ACP, env=agent.env, **options
    )
    async with await Toolkit.load(tools=[add]) as toolkit:
        return await client.run("go", toolkit, session_id=session_id)


def params(agent, method: str) -> list[dict[str, Any]]:
    received = agent.received(method)
    assert received, f"the agent received no {method}"
    return [entry["params"] for entry in received]


async def test_a_turn_over_http_sends_what_the_schema_describes(agent, session_id):
    options = [{"id": "group", "options": [{"id": "engine", "category": "model", "currentValue": "a"}]}]
    agent.script(
        [[{"tool": "add", "arguments": {"a": 1, "b": 2}, "permission": True}, {"shell": "rm -rf /"}, {"say": "3"}]],
        session={"configOptions": options},
    )
    result = await run(agent, session_id, model="big-model")
    assert result.status == "completed", result.error
    for sent in params(agent, "initialize"):
        conforms(schema.InitializeRequest, sent)
    for sent in params(agent, "session/new"):
        assert sent["mcpServers"][0]["type"] == "http"
        conforms(schema.NewSessionRequest, sent)
    for sent in params(agent, "session/set_config_option"):
        conforms(schema.SetSessionConfigOptionSelectRequest, sent)
    for sent in params(agent, "session/prompt"):
        conforms(schema.PromptRequest, sent)
    responses = [entry["result"] for entry in agent.log("permission_response")]
    assert [r["outcome"].get("optionId") for r in responses] == ["yes", "no"]
    for sent in responses:
        conforms(schema.RequestPermissionResponse, sent)


def test_every_permission_outcome_fits_the_schema():
    offered = [{"optionId": "yes", "kind": "allow_always"}, {"optionId": "no", "kind": "reject_always"}]
    for outcome in (choose(offered, allow=True), choose(offered, allow=False), choose(None, allow=True), CANCELLED):
        conforms(schema.RequestPermissionResponse, outcome)


async def test_a_cancelled_turn_and_a_loaded_session_over_stdio_send_what_the_schema_describes(agent, session_id):
    agent.script([[{"say": "working"}, {"sleep": 60}], [{"say": "again"}]], capabilities={"loadSession": True})
    first = await run(agent, session_id, timeout=2)
    assert first.status == "failed"
    for sent in params(agent, "session/cancel"):
        conforms(schema.CancelNotification, sent)
    second = await run(agent, session_id)
    assert second.status == "completed", second.error
    for sent in params(agent, "session/new") + params(agent, "session/load"):
        assert "type" not in sent["mcpServers"][0], "the stdio bridge"
        conforms(schema.NewSessionRequest if "sessionId" not in sent else schema.LoadSessionRequest, sent)
    for sent in params(agent, "session/prompt"):
        conforms(schema.PromptRequest, sent)
