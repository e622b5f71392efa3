"""How often a run asks where result storage is: Prefect asks the server at every lookup."""

import pytest

import nexusflow._storage as storage_module
from nexusflow import ScriptedModel, Toolkit, create_in_process_client, tool

pytestmark = pytest.mark.anyio


@tool
def echo(text: str) -> str:
    """Returns its argument."""
    return text


async def test_runs_of_one_process_share_one_storage_lookup(monkeypatch, session_id):
    lookups: list[object] = []
    real = storage_module.aget_default_result_storage

    async def counted():
        lookups.append(None)
        return await real()

    monkeypatch.setattr(storage_module, "aget_default_result_storage", counted)
    monkeypatch.setattr(storage_module, "_looked_up", {}, raising=False)
    reply = {"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}
    async with await Toolkit.load(tools=[echo]) as toolkit:
        for n in range(2):
            client = create_in_process_client(ScriptedModel([reply, "done"]))
            result = await client.run("go", toolkit, session_id=f"{session_id}-{n}")
            assert result.status == "completed", result.error
    assert len(lookups) == 1, f"{len(lookups)} lookups for two runs"
