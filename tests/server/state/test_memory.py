"""client.ask keeps a conversation across runs and processes."""

import os
import subprocess
import sys

import pytest

from nexusflow import LocalConversationStore, RunResult, StorageConversationStore, create_in_process_client
from nexusflow.testing import ScriptedModel

from paths import HELPERS

pytestmark = [pytest.mark.anyio]


def ask(conversation: str, prompt: str) -> RunResult:
    done = subprocess.run(
        [sys.executable, str(HELPERS / "ask.py"), conversation, prompt],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return RunResult.model_validate_json(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_ask_remembers_the_previous_exchange_in_a_new_process(session_id):
    assert ask(session_id, "My name is Ann.").text == "Nice to meet you."
    second = ask(session_id, "What is my name?")
    assert second.text == "Ann"
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert second.session_id == f"{session_id}.1"
    assert ask(session_id + "-other", "What is my name?").text == "I do not know."


async def test_a_store_is_pluggable(tmp_path, session_id):
    class Recording(LocalConversationStore):
        saves = 0

        async def save(self, conversation_id, messages):
            Recording.saves += 1
            await super().save(conversation_id, messages)

    store = Recording(tmp_path)
    model = ScriptedModel(["first", lambda r: f"seen {sum(m.role == 'user' for m in r.messages)} prompts"])
    client = create_in_process_client(model, conversation_store=store)
    await client.ask("one", conversation_id=session_id)
    result = await client.ask("two", conversation_id=session_id)
    assert result.text == "seen 2 prompts"
    assert Recording.saves == 2
    assert (tmp_path / f"{session_id}.json").exists()
    assert [m.content for m in await store.get(session_id)] == ["one", "first", "two", "seen 2 prompts"]


async def test_the_default_store_keeps_conversations_in_result_storage(storage, session_id):
    """Another machine that sees the same result storage goes on from the conversation:
    its record is under the storage's nexusflow/conversations, not in a side folder."""
    client = create_in_process_client(ScriptedModel(["noted", lambda r: f"{len(r.messages)} messages"]))
    await client.ask("one", conversation_id=session_id)
    records = list((storage / "nexusflow" / "conversations").glob("*.json"))
    assert [record for record in records if "noted" in record.read_text()]
    assert not (storage / "nexusflow" / "conversations" / f"{session_id}.json").exists()
    assert [m.content for m in await StorageConversationStore().get(session_id)] == ["one", "noted"]
    assert (await client.ask("two", conversation_id=session_id)).text == "3 messages"
