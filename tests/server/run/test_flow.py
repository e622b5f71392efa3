"""The agent loop as a real Prefect flow, against the session's Prefect server."""

import threading
import time

import pytest
from prefect import flow

from nexusflow import (
    ModelReply,
    ModelRequest,
    SessionIdError,
    ToolCall,
    Toolkit,
    ToolResult,
    create_in_process_client,
    tool,
)
from nexusflow.testing import ScriptedModel

from helpers.prefect_api import flow_run, task_run, task_runs

pytestmark = [pytest.mark.anyio]

both_running = threading.Barrier(2, timeout=20)


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key}"


@tool
def together(label: str, delay: float = 0.0) -> str:
    """Only returns once a second call is running at the same time."""
    both_running.wait()
    time.sleep(delay)
    return f"done-{label}"


def tool_contents(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


async def test_three_turns_with_parallel_calls(session_id):
    both_running.reset()
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "lookup", "arguments": {"key": "k1"}}]},
            {
                "tool_calls": [
                    {"id": "slow", "name": "together", "arguments": {"label": "first", "delay": 0.5}},
                    {"id": "fast", "name": "together", "arguments": {"label": "second"}},
                ]
            },
            lambda request: "answer: " + " | ".join(tool_contents(request)),
        ]
    )
    client = create_in_process_client(model, system_prompt="You are terse.")
    async with await Toolkit.load(tools=[lookup, together]) as toolkit:
        result = await client.run("go", toolkit, session_id=session_id)

    assert result.status == "completed", result.error
    assert result.text == "answer: value-of-k1 | done-first | done-second"
    assert [m.role for m in result.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert [m.tool_call_id for m in result.messages if m.role == "tool"][1:] == ["slow", "fast"]
    assert result.metrics.turns == 3 and result.metrics.tool_calls == 3 and result.metrics.tool_errors == 0
    assert model.requests[0].messages[0].content == "You are terse."
    assert {t.name for t in model.requests[0].tools} == {"lookup", "together"}

    runs = await task_runs(result.flow_run_id, expected=6)
    assert sorted(run.name for run in runs) == sorted(
        ["turn-0", "tool-0-lookup", "turn-1", "tool-1-together", "tool-1-together-2", "turn-2"]
    )
    assert all(run.state.is_completed() for run in runs)
    recorded = await flow_run(result.flow_run_id)
    assert recorded.name == f"agent-{session_id}"
    assert recorded.state.is_completed()


async def test_model_mistakes_reach_the_model_and_the_run_completes(session_id):
    @tool
    def fragile(n: int) -> int:
        """Raises on purpose."""
        raise RuntimeError(f"fragile failed on {n}")

    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "no_such_tool", "arguments": {}},
                    {"name": "fragile", "arguments": {"n": 3}},
                    {"name": "fragile", "arguments": {"n": "three"}},
                ]
            },
            lambda request: "\n".join(tool_contents(request)),
        ]
    )
    async with await Toolkit.load(tools=[fragile]) as toolkit:
        result = await create_in_process_client(model).run("try", toolkit, session_id=session_id)
    assert result.status == "completed"
    unknown, raised, invalid = result.text.split("\n")
    assert unknown == 'error: unknown tool "no_such_tool" (available: fragile)'
    assert raised == 'error: tool "fragile" raised RuntimeError: fragile failed on 3'
    assert invalid.startswith('error: invalid arguments for tool "fragile": n: Input should be a valid integer')
    assert result.metrics.tool_errors == 3


async def test_max_turns_exceeded_fails_the_run(session_id):
    executed = []

    @tool
    def again() -> str:
        """Asks for more."""
        executed.append(1)
        return "more"

    model = ScriptedModel([{"tool_calls": [{"name": "again", "arguments": {}}]}] * 5)
    async with await Toolkit.load(tools=[again]) as toolkit:
        result = await create_in_process_client(model, max_turns=3).run("loop", toolkit, session_id=session_id)
    assert result.status == "failed"
    assert result.error == "max turns exceeded: no final answer after 3 turns"
    assert model.calls == 3
    assert len(executed) == 2, "the calls of the last allowed turn must not run"
    assert [m.role for m in result.messages] == ["user"] + ["assistant", "tool"] * 2 + ["assistant"]
    recorded = await flow_run(result.flow_run_id)
    assert recorded.state.is_failed()
    assert recorded.state.message == "max turns exceeded: no final answer after 3 turns"


async def test_a_raising_model_fails_the_run_with_its_error(session_id):
    def generate(request):
        raise ConnectionError("upstream is down")

    result = await create_in_process_client(generate).run("hi", session_id=session_id)
    assert result.status == "failed"
    assert result.error == "model: generate raised ConnectionError: upstream is down"
    assert (await flow_run(result.flow_run_id)).state.is_failed()


async def test_an_empty_reply_fails_the_run(session_id):
    result = await create_in_process_client(lambda r: {"content": None}).run("hi", session_id=session_id)
    assert result.status == "failed"
    assert result.error == "model: empty reply (no content and no tool calls)"


async def test_hooks_see_and_change_turns_and_calls(session_id):
    seen: list[tuple[str, object]] = []

    def before_llm(request: ModelRequest):
        return request.model_copy(update={"tools": [t for t in request.tools if t.name != "secret"]})

    async def after_llm(request: ModelRequest, reply: ModelReply):
        seen.append(("after_llm", len(request.tools)))
        if reply.content:
            return ModelReply(content=reply.content.upper())
        return None

    def before_tool(call: ToolCall):
        if call.name == "blocked":
            return ToolResult(content="blocked by policy", is_error=True)
        if call.arguments == '{"key": "raw"}':
            return {"key": "rewritten"}
        return None

    async def after_tool(call: ToolCall, result: ToolResult):
        seen.append(("after_tool", call.arguments))
        return result.content + "!"

    @tool
    def secret() -> str:
        """Hidden from the model by before_llm."""
        return "s"

    @tool
    def blocked() -> str:
        """Must never run."""
        raise AssertionError("blocked ran")

    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "lookup", "arguments": '{"key": "raw"}'}, {"name": "blocked", "arguments": {}}]},
            lambda request: " / ".join(tool_contents(request)),
        ]
    )
    client = create_in_process_client(
        model, before_llm=before_llm, after_llm=after_llm, before_tool=before_tool, after_tool=after_tool
    )
    async with await Toolkit.load(tools=[lookup, secret, blocked]) as toolkit:
        result = await client.run("hooks", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert [t.name for t in model.requests[0].tools] == ["lookup", "blocked"]
    assert result.text == "VALUE-OF-REWRITTEN! / BLOCKED BY POLICY!"
    assert ("after_tool", '{"key": "rewritten"}') in seen
    assert result.metrics.tool_errors == 1


async def test_a_raising_hook_fails_the_run(session_id):
    def before_tool(call):
        raise PermissionError("policy store unreachable")

    model = ScriptedModel([{"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}]}, "done"])
    async with await Toolkit.load(tools=[lookup]) as toolkit:
        result = await create_in_process_client(model, before_tool=before_tool).run("x", toolkit, session_id=session_id)
    assert result.status == "failed"
    assert result.error == "hook before_tool raised PermissionError: policy store unreachable"


async def test_a_changed_prompt_with_the_same_session_reruns_the_model(session_id):
    model = ScriptedModel([lambda r: f"echo {r.messages[-1].content}"] * 3)
    client = create_in_process_client(model)
    first = await client.run("one", session_id=session_id)
    again = await client.run("one", session_id=session_id)
    changed = await client.run("two", session_id=session_id)
    assert (first.text, again.text, changed.text) == ("echo one", "echo one", "echo two")
    assert model.calls == 2
    assert again.metrics.replayed_turns == 1 and changed.metrics.replayed_turns == 0


async def test_agent_run_inside_a_user_flow_is_a_subflow(session_id):
    client = create_in_process_client(ScriptedModel(["inner answer"]))

    @flow(name="user-pipeline")
    async def pipeline(topic: str) -> dict:
        result = await client.run(f"summarize {topic}", session_id=session_id)
        from prefect.runtime import flow_run as current

        return {"parent": str(current.get_id()), "child": result.flow_run_id, "text": result.text}

    out = await pipeline("prefect")
    assert out["text"] == "inner answer"
    child = await flow_run(out["child"])
    assert child.parent_task_run_id is not None
    parent_task = await task_run(child.parent_task_run_id)
    assert str(parent_task.flow_run_id) == out["parent"]


def test_run_sync_inside_a_sync_flow_is_a_subflow(session_id):
    client = create_in_process_client(ScriptedModel(["sync answer"]))

    @flow(name="sync-user-pipeline")
    def pipeline() -> tuple[str, str | None]:
        from prefect.runtime import flow_run as current

        result = client.run_sync("hello", session_id=session_id)
        return str(current.get_id()), result.flow_run_id, result.text

    import anyio

    parent_id, child_id, text = pipeline()
    assert text == "sync answer"
    child = anyio.run(flow_run, child_id)
    parent_task = anyio.run(task_run, child.parent_task_run_id)
    assert str(parent_task.flow_run_id) == parent_id


@pytest.mark.parametrize("bad", ["", "a/b", "..", "x" * 129, "space here"])
async def test_invalid_session_ids_are_refused_before_running(bad):
    with pytest.raises(SessionIdError, match="invalid session id"):
        await create_in_process_client(ScriptedModel([])).run("x", session_id=bad)


def test_unknown_client_options_are_refused():
    with pytest.raises(ValueError, match="max_turnz"):
        create_in_process_client(lambda r: "x", max_turnz=3)


async def test_agent_run_started_without_a_client_fails_clearly():
    from nexusflow import agent_run

    state = await agent_run(prompt="x", session_id="no-client", return_state=True)
    assert state.is_failed()
    assert "agent_run needs a client and a toolkit" in state.message


async def test_the_live_run_reaches_the_flow_as_a_parameter_the_server_stores_as_a_placeholder(session_id):
    """The flow's parameters are shown in the UI: the client's system prompt, tools and
    transport never reach the server."""
    secret_prompt = "the system prompt only the model sees"
    client = create_in_process_client(lambda request: "done", system_prompt=secret_prompt)
    result = await client.run("go", session_id=session_id)
    assert result.status == "completed", result.error
    recorded = await flow_run(result.flow_run_id)
    assert recorded.parameters["live"] == "<LiveRun>"
    assert secret_prompt not in recorded.model_dump_json()


def test_the_tests_talk_to_the_session_server_not_an_ephemeral_one(prefect_server):
    from prefect.settings import get_current_settings

    assert get_current_settings().api.url == prefect_server
