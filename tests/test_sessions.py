"""Sessions over their life: a run that waits for an answer looks waiting to Prefect, an
answer is for one call with its arguments and is used once."""

from __future__ import annotations

from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterState, FlowRunFilterStateType
from prefect.client.schemas.objects import StateType

from nexusflow import Answer, ModelRequest, Toolkit, create_in_process_client, current_answer, suspend, tool
from nexusflow.errors import ResumeError
from nexusflow.memory import SessionStore
from nexusflow.testing import ScriptedModel

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("prefect_server")]

deployed: list[str] = []


@tool
def deploy(service: str) -> str:
    """Deploy a service, after approval."""
    if current_answer() is None:
        return suspend(f"May I deploy {service}?")
    deployed.append(service)
    return f"deployed {service}"


def asks_then_says(request: ModelRequest) -> dict[str, object] | str:
    results = [message.content for message in request.messages if message.role == "tool"]
    if not results:
        return {"tool_calls": [{"name": "deploy", "arguments": {"service": "web"}}]}
    return f"done: {results[-1]}"


async def _of_type(flow_run_id: str, kind: StateType) -> bool:
    async with get_client() as client:
        found = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[UUID(flow_run_id)]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[kind])),
            )
        )
    return len(found) == 1


async def _state(flow_run_id: str) -> tuple[StateType | None, str | None]:
    async with get_client() as client:
        state = (await client.read_flow_run(UUID(flow_run_id))).state
    return (state.type, state.name) if state else (None, None)


async def test_a_waiting_run_is_paused_for_prefect_and_answered_once_it_goes_on(session_id):
    """Prefect's state-type filter, which its dashboards and ``prefect flow-run ls`` use, does
    not count a run that waits for an answer as completed; once answered, it is."""
    deployed.clear()
    client = create_in_process_client(asks_then_says)
    async with await Toolkit.load(tools=[deploy]) as toolkit:
        waiting = await client.run("deploy web", toolkit, session_id=session_id)
        assert waiting.status == "pending" and waiting.flow_run_id and waiting.request
        assert not await _of_type(waiting.flow_run_id, StateType.COMPLETED)
        assert await _of_type(waiting.flow_run_id, StateType.PAUSED)
        assert await _state(waiting.flow_run_id) == (StateType.PAUSED, "AwaitingAnswer")

        done = await client.resume(session_id, Answer(id=waiting.request.id, ok=True), toolkit)
    assert done.status == "completed" and done.text == "done: deployed web", done.error
    assert deployed == ["web"]
    assert await _state(waiting.flow_run_id) == (StateType.COMPLETED, "Answered")
    with pytest.raises(ResumeError, match="is not waiting for an answer"):
        await client.resume(session_id, Answer(id=waiting.request.id, ok=True))


async def test_an_approval_is_never_used_for_another_call_at_its_place(session_id):
    """The stored request names the call it asks about, with its arguments; an answer given
    for other arguments (here the record says ``db``, the call is ``web``) is not this call's:
    the run asks again instead of running ``web`` on an approval for ``db``."""
    deployed.clear()
    client = create_in_process_client(asks_then_says)
    async with await Toolkit.load(tools=[deploy]) as toolkit:
        waiting = await client.run("deploy web", toolkit, session_id=session_id)
        assert waiting.request is not None
        store = SessionStore()
        state = await store.get(session_id)
        assert state is not None and state.pending is not None
        other = state.pending.model_copy(update={"arguments": '{"service": "db"}'})
        await store.save(session_id, state.model_copy(update={"pending": other}))

        again = await client.resume(session_id, Answer(id=waiting.request.id, ok=True), toolkit)
    assert again.status == "pending", again.text
    assert again.request is not None and again.request.arguments == waiting.request.arguments
    assert deployed == []


async def test_a_python_run_that_waits_says_how_to_answer_it(session_id, caplog):
    client = create_in_process_client(
        ScriptedModel([{"tool_calls": [{"name": "deploy", "arguments": {"service": "api"}}]}])
    )
    async with await Toolkit.load(tools=[deploy]) as toolkit:
        waiting = await client.run("deploy api", toolkit, session_id=session_id)
    assert waiting.status == "pending"
    assert f"answer with: nexusflow answer {session_id} --approve|--deny" in caplog.text


SCRIPT = [{"tool_calls": [{"name": "deploy", "arguments": {"service": "api"}}]}, "all done"]


async def test_a_fresh_scripted_model_resumes_a_waiting_run(session_id):
    """As a new process would: another client, another ``ScriptedModel`` of the same script.
    The first turn replays from storage, so the model is asked for turn 1 only, and plays
    reply 1 (it played reply 0 before, counting calls)."""
    deployed.clear()
    async with await Toolkit.load(tools=[deploy]) as toolkit:
        waiting = await create_in_process_client(ScriptedModel(SCRIPT)).run("go", toolkit, session_id=session_id)
        assert waiting.status == "pending" and waiting.request is not None
        fresh = ScriptedModel(SCRIPT)
        done = await create_in_process_client(fresh).resume(session_id, Answer(id=waiting.request.id, ok=True), toolkit)
    assert done.status == "completed" and done.text == "all done", done.error
    assert fresh.calls == 1 and deployed == ["api"]


def test_ask_resume_and_map_have_sync_twins(session_id):
    deployed.clear()
    toolkit = Toolkit([deploy])
    client = create_in_process_client(ScriptedModel(SCRIPT))
    waiting = client.run_sync("go", toolkit, session_id=session_id)
    assert waiting.request is not None
    done = client.resume_sync(session_id, Answer(id=waiting.request.id, ok=True), toolkit)
    assert done.text == "all done" and deployed == ["api"]
    talker = create_in_process_client(ScriptedModel(["hello", "again"]))
    assert talker.ask_sync("hi", conversation_id=f"{session_id}-talk").text == "hello"
    assert talker.ask_sync("more", conversation_id=f"{session_id}-talk").text == "again"
    echo = create_in_process_client(lambda request: request.messages[-1].content.upper())
    assert [result.text for result in echo.map_sync(["a", "b"], session_id=f"{session_id}-batch")] == ["A", "B"]
