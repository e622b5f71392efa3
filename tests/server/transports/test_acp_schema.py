"""What the ACP transport sends, checked against the official schema (the
``agent-client-protocol`` package's pydantic models), as the scripted agent received it.

Each payload must validate and dump back unchanged (``exclude_unset``, so defaults the
models add do not matter): a field the schema does not know would be dropped and show.
``session/set_model`` is not checked: the package has no model for it (it is not in the
stable schema). A well-formed script must also reach the client wholly through the SDK's
models, with nothing from the scripted agent's raw layer.
"""

from typing import Any

import pytest
from acp import schema
from pydantic import BaseModel

from nexusflow import Toolkit, Transport, create_cli_client, tool
from nexusflow.transports.acp.permissions import CANCELLED, choose

pytestmark = [pytest.mark.anyio]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def conforms(model: type[BaseModel], payload: dict[str, Any]) -> None:
    parsed = model.model_validate(payload)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == payload, model.__name__


async def run(agent, session_id, style=None, **options):
    client = create_cli_client(
        style=style or agent.style, command=agent.command, transport=Transport.ACP, env=agent.env, **options
    )
    async with await Toolkit.load(tools=[add]) as toolkit:
        return await client.run("go", toolkit, session_id=session_id)


def params(agent, method: str) -> list[dict[str, Any]]:
    received = agent.received(method)
    assert received, f"the agent received no {method}"
    return [entry["params"] for entry in received]


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
async def test_a_mode_switch_a_model_option_and_a_resumed_session_send_what_the_schema_describes(agent, session_id):
    modes = {"currentModeId": "auto", "availableModes": [{"id": "auto", "name": "Auto"}, {"id": "ask", "name": "Ask"}]}
    model = {
        "id": "model",
        "name": "Model",
        "type": "select",
        "currentValue": "a",
        "options": [{"value": "a", "name": "A"}],
    }
    agent.script(
        [[{"say": "working"}, {"crash": 9}], [{"say": "resumed"}]],
        capabilities={"mcpCapabilities": {"http": True}, "sessionCapabilities": {"resume": {}}},
        session={"modes": modes, "configOptions": [model]},
    )
    style = agent.style.model_copy(update={"acp": agent.style.acp.model_copy(update={"mode": "ask"})})
    assert (await run(agent, session_id, style=style, model="b")).status == "failed"
    second = await run(agent, session_id, style=style, model="b")
    assert second.status == "completed", second.error
    (resumed,) = params(agent, "session/resume")
    conforms(schema.ResumeSessionRequest, resumed)
    assert [sent["modeId"] for sent in params(agent, "session/set_mode")] == ["ask", "ask"], "new, then resumed"
    for sent in params(agent, "session/set_mode"):
        conforms(schema.SetSessionModeRequest, sent)
    for sent in params(agent, "session/set_config_option"):
        assert (sent["configId"], sent["value"]) == ("model", "b")
        conforms(schema.SetSessionConfigOptionSelectRequest, sent)
    assert agent.log("raw") == [], "a well-formed script is sent through the SDK's models"


async def test_only_what_the_sdk_cannot_express_goes_raw(agent, session_id):
    agent.script(
        [
            [
                {"update": {"sessionUpdate": "hologram_update", "payload": 1}},
                {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "typed "}}},
                {"notify": "_auth/status_update"},
                {"malformed": True},
                {"request": "fs/read_text_file"},
                {"say": "done"},
                {"stop": "galaxy_brain"},
            ]
        ]
    )
    result = await run(agent, session_id)
    assert result.status == "completed", result.error
    assert result.text == "typed done"
    raw = [entry["what"] for entry in agent.log("raw")]
    assert raw == ["session/update", "_auth/status_update", "malformed", "fs/read_text_file", "PromptResponse"]
