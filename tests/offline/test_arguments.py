"""Each public entry point refuses a wrong type or value where it is given, in one line
naming the call and the argument: never an AttributeError from inside, never a run that
fails at its first turn. None of these needs a server: nothing starts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from nexusflow import (
    Answer,
    CliStyles,
    NexusflowError,
    Toolkit,
    create_cli_client,
    create_in_process_client,
    tool,
)
from nexusflow.errors import ArgumentError
from nexusflow.testing import ScriptedModel, crash_at_every_step


def plain(a: int) -> int:
    """A plain function, no decorator."""
    return a


def client() -> Any:
    return create_in_process_client(lambda request: "done")


TOOL = "a tool (a @tool function, a plain function or a Tool)"
CALLABLE = "callable (a function, or an object with __call__)"
CASES: list[tuple[str, Callable[[], object], str]] = [
    ("Toolkit([42])", lambda: Toolkit([42]), f"Toolkit: tools[0] must be {TOOL}, not 42 (int)"),
    ("Toolkit('ab')", lambda: Toolkit("ab"), "Toolkit: tools must be a list, not 'ab' (str)"),
    (
        "Toolkit(instructions=1)",
        lambda: Toolkit(instructions=1),
        "Toolkit: instructions must be text (a str), not 1 (int)",
    ),
    (
        "Toolkit.load([plain, 3])",
        lambda: asyncio.run(Toolkit.load(tools=[plain, 3])),
        f"Toolkit: tools[1] must be {TOOL}, not 3 (int)",
    ),
    (
        "Toolkit.load(mcp_config=42)",
        lambda: asyncio.run(Toolkit.load(mcp_config=42)),
        "Toolkit.load: mcp_config must be a path to an mcp.json or its dict, not 42 (int)",
    ),
    (
        "Toolkit.load(skills_dir=42)",
        lambda: asyncio.run(Toolkit.load(skills_dir=42)),
        "Toolkit.load: skills_dir must be a path to a folder of skills, not 42 (int)",
    ),
    ("tool(3)", lambda: tool(3), f"tool: the decorated object must be {CALLABLE}, not 3 (int)"),
    ("tool(name=3)", lambda: tool(name=3), "tool: name must be text (a str), not 3 (int)"),
    (
        "create_in_process_client('x')",
        lambda: create_in_process_client("not callable"),
        f"create_in_process_client: generate must be {CALLABLE}, not 'not callable' (str)",
    ),
    (
        "create_in_process_client(max_turns=0)",
        lambda: create_in_process_client(plain, max_turns=0),
        "create_in_process_client: max_turns: input should be greater than or equal to 1, not 0 (int)",
    ),
    (
        "create_in_process_client(max_turn=3)",
        lambda: create_in_process_client(plain, max_turn=3),
        "create_in_process_client: max_turn is not an option (the options: after_llm, after_tool, before_llm,"
        " before_tool, conversation_store, fallback, max_argument_depth, max_cost_usd, max_parallel_tool_calls,"
        " max_quota_wait, max_tokens, max_tool_calls, max_tool_result, max_turns, model, model_retries,"
        " model_retry_wait, on_quota, output_retries, output_type, policies, quota_wait, subscription,"
        " system_prompt, task_config, wait_for)",
    ),
    (
        "create_cli_client(command=3)",
        lambda: create_cli_client(CliStyles.CLAUDE, 3),
        "create_cli_client: command: input should be a valid string, not 3 (int)",
    ),
    (
        "create_cli_client(timeout=-1)",
        lambda: create_cli_client(CliStyles.CLAUDE, "claude", timeout=-1),
        "create_cli_client: timeout: input should be greater than 0, not -1 (int)",
    ),
    ("run_sync(123)", lambda: client().run_sync(123), "run: prompt must be text (a str), not 123 (int)"),
    (
        "run_sync(toolkit=3)",
        lambda: client().run_sync("hi", 3),
        "run: toolkit must be a Toolkit (Toolkit([...]) or await Toolkit.load(...)) or None, not 3 (int)",
    ),
    (
        "run_sync(session_id=3)",
        lambda: client().run_sync("hi", session_id=3),
        "run: session_id must be text (a str), not 3 (int)",
    ),
    ("run(b'x')", lambda: asyncio.run(client().run(b"x")), "run: prompt must be text (a str), not b'x' (bytes)"),
    (
        "ask(5)",
        lambda: asyncio.run(client().ask(5, conversation_id="c")),
        "ask: prompt must be text (a str), not 5 (int)",
    ),
    (
        "ask(conversation_id=5)",
        lambda: asyncio.run(client().ask("hi", conversation_id=5)),
        "ask: conversation_id must be text (a str), not 5 (int)",
    ),
    (
        "resume(answer='yes')",
        lambda: asyncio.run(client().resume("s", "yes")),
        "resume: answer must be an Answer (Answer(id=request.id, ok=True)), not 'yes' (str)",
    ),
    ("map('abc')", lambda: asyncio.run(client().map("abc")), "map: prompts must be a list of str, not 'abc' (str)"),
    ("map(['a', 2])", lambda: asyncio.run(client().map(["a", 2])), "map: prompts[1] must be text (a str), not 2 (int)"),
    (
        "as_tool(name=3)",
        lambda: client().as_tool(name=3, description="d"),
        "as_tool: name must be text (a str), not 3 (int)",
    ),
    ("ScriptedModel('abc')", lambda: ScriptedModel("abc"), "ScriptedModel: replies must be a list, not 'abc' (str)"),
    (
        "crash_at_every_step(concurrency=0)",
        lambda: crash_at_every_step("never-run.py", concurrency=0),
        "crash_at_every_step: concurrency must be an int of 1 or more, not 0 (int)",
    ),
]


@pytest.mark.parametrize(
    ("call", "message"), [(call, message) for _, call, message in CASES], ids=[c[0] for c in CASES]
)
def test_a_wrong_argument_is_refused_in_one_line_naming_it(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ArgumentError) as raised:
        call()
    assert str(raised.value) == message
    assert isinstance(raised.value, NexusflowError) and isinstance(raised.value, TypeError | ValueError)


def test_a_plain_function_becomes_a_tool_in_a_toolkit() -> None:
    kit = Toolkit([plain])
    assert kit.names == ["plain"]
    result = asyncio.run(kit.call("plain", {"a": 4}))
    assert (result.content, result.is_error) == ("4", False)


def test_a_stream_refuses_its_prompt_before_it_yields() -> None:
    async def first() -> object:
        async for event in client().stream(7):
            return event
        return None

    with pytest.raises(ArgumentError, match=r"^stream: prompt must be text \(a str\), not 7 \(int\)$"):
        asyncio.run(first())


def test_answer_is_checked_by_pydantic_as_every_message_model_is() -> None:
    """The data models stay pydantic models: their own ValidationError names the field."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="ok"):
        Answer(id="x", ok="perhaps")
