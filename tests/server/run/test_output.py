"""Typed output: the schema reaches the model on every transport, the final answer is
validated, an invalid one is sent back (then fails, pinned), and the validated value is
replayed on resume, survives the flow result, and is a job's result."""

import json
import threading
from dataclasses import dataclass

import pytest
from prefect import flow
from pydantic import BaseModel

from nexusflow import (
    Answer,
    CliStyles,
    ModelRequest,
    OutputError,
    RunResult,
    Toolkit,
    Transport,
    UserMessage,
    create_cli_client,
    create_in_process_client,
    current_answer,
    suspend,
    tool,
)
from nexusflow.testing import ScriptedModel
from nexusflow.transports.oneshot import REQUEST_MARKER

from cli_fixtures import styled
from helpers.docs import block
from helpers.output_types import Point, Report

pytestmark = [pytest.mark.anyio]


SCHEMA = json.dumps(Report.model_json_schema(), ensure_ascii=False)
VALID = '{"title": "disk full", "severity": 2}'
FENCED = f"```json\n{VALID}\n```"
EXPECTED = Report(title="disk full", severity=2)


@dataclass
class Seen:
    """A typed-output run on one transport, and what its model read on each turn."""

    result: RunResult
    prompts: list[str]


async def in_process(answers: list[str], session_id: str, **options) -> Seen:
    model = ScriptedModel(answers)
    result = await create_in_process_client(model, **options).run("triage", session_id=session_id)
    for request in model.requests:
        assert request.response_format == {
            "type": "json_schema",
            "json_schema": {"name": "Report", "schema": Report.model_json_schema(), "strict": False},
        }
    return Seen(result, [json.dumps(request.body(), ensure_ascii=False) for request in model.requests])


async def one_shot_cli(answers: list[str], session_id: str, fake, **options) -> Seen:
    fake.script(
        *(styled("claude", json.dumps({"content": json.loads(a)}) if a.startswith("{") else a) for a in answers)
    )
    client = create_cli_client(CliStyles.CLAUDE, command=fake.command, transport=Transport.CLI, model="m", **options)
    result = await client.run("triage", session_id=session_id)
    prompts = [call["stdin"] for call in fake.calls()]
    for prompt in prompts:
        instructions = prompt[: prompt.index(REQUEST_MARKER)]
        assert instructions.endswith(f'given as the value of "content": {SCHEMA}'), instructions[-300:]
        assert "The final answer must be JSON that matches this JSON schema" in instructions
    return Seen(result, prompts)


async def acp(answers: list[str], session_id: str, agent, **options) -> Seen:
    agent.script([[{"say": answer}] for answer in answers])
    client = create_cli_client(
        style=agent.style, command=agent.command, transport=Transport.ACP, env=agent.env, **options
    )
    async with await Toolkit.load() as toolkit:
        result = await client.run("triage", toolkit, session_id=session_id)
    prompts = [entry["params"]["prompt"][0]["text"] for entry in agent.received("session/prompt")]
    for prompt in prompts:
        assert prompt.endswith(
            f"Your final answer must be JSON that matches this JSON schema, and nothing else: {SCHEMA}"
        )
    return Seen(result, prompts)


@pytest.fixture(params=["in_process", "cli", "acp"])
def transport(request, fake, agent):
    """Runs answers through one transport, with ``output_type=Report`` and the options given."""

    async def run(answers: list[str], session_id: str, **options) -> Seen:
        options = {"output_type": Report, **options}
        if request.param == "in_process":
            return await in_process(answers, session_id, **options)
        if request.param == "cli":
            return await one_shot_cli(answers, session_id, fake, **options)
        return await acp(answers, session_id, agent, **options)

    return run


async def test_a_valid_answer_is_the_output(transport, session_id):
    seen = await transport([VALID], session_id)
    assert seen.result.status == "completed", seen.result.error
    assert seen.result.output == EXPECTED and isinstance(seen.result.output, Report)
    assert seen.result.text == VALID
    assert seen.result.metrics.output_repairs == 0 and len(seen.prompts) == 1


async def test_an_invalid_answer_is_sent_back_with_its_errors_and_repaired(transport, session_id):
    seen = await transport(['{"title": 7}', FENCED], session_id)
    assert seen.result.status == "completed", seen.result.error
    assert seen.result.output == EXPECTED
    assert seen.result.text.strip() == FENCED, "text stays the answer as written"
    assert seen.result.metrics.output_repairs == 1 and seen.result.metrics.turns == 2
    repair = (
        "Your final answer does not match the required output type Report: "
        "title: Input should be a valid string; severity: Field required. "
        "Answer again with only JSON that matches the schema."
    )
    assert repair in seen.prompts[1] and repair not in seen.prompts[0]
    assert seen.result.messages[-2] == UserMessage(content=repair)


@pytest.mark.slow
async def test_an_answer_still_invalid_after_the_repairs_fails_the_run(transport, session_id):
    seen = await transport(["not json", "[]"], session_id, output_retries=1)
    assert seen.result.status == "failed" and seen.result.output is None
    assert (
        seen.result.error == "output: the final answer does not match Report after 1 repairs: Input should be an object"
    )
    assert len(seen.prompts) == 2 and seen.result.metrics.output_repairs == 1


async def test_no_repairs_quotes_the_first_errors_of_the_answer(session_id):
    class Many(BaseModel):
        a: int
        b: int
        c: int
        d: int

    result = await create_in_process_client(ScriptedModel(["{}"]), output_retries=0).run(
        "go", session_id=session_id, output_type=Many
    )
    assert result.error == (
        "output: the final answer does not match Many after 0 repairs: "
        "a: Field required; b: Field required; c: Field required (and 1 more)"
    )
    result = await create_in_process_client(ScriptedModel(["nope"]), output_retries=0).run(
        "go", session_id=f"{session_id}-json", output_type=Many
    )
    assert result.error.endswith("after 0 repairs: Invalid JSON: expected ident at line 1 column 2")


async def test_the_output_replays_on_resume_without_a_model_call(session_id):
    model = ScriptedModel(["nope", VALID])
    client = create_in_process_client(model, output_type=Report)
    first = await client.run("triage", session_id=session_id)
    assert first.status == "completed" and first.output == EXPECTED, first.error
    again = await client.run("triage", session_id=session_id)
    assert again.status == "completed", again.error
    assert again.output == EXPECTED and isinstance(again.output, Report)
    assert model.calls == 2, "the resumed run asked the model nothing"
    assert again.metrics.replayed_turns == again.metrics.turns == 2
    assert again.metrics.output_repairs == 1


async def test_the_output_type_is_part_of_the_turn_key(session_id):
    model = ScriptedModel([lambda request: VALID if request.output_schema == Report.model_json_schema() else "[1, 2]"])
    client = create_in_process_client(model)
    first = await client.run("triage", session_id=session_id, output_type=Report)
    other = await client.run("triage", session_id=session_id, output_type=list[int])
    assert (first.output, other.output) == (EXPECTED, [1, 2]), (first.error, other.error)
    assert model.calls == 2 and other.metrics.replayed_turns == 0


async def test_the_client_default_is_overridden_per_run(session_id):
    answers = {"a": VALID, "b": "[3, 4]", "c": "plain words"}
    model = ScriptedModel([lambda request: answers[str(request.messages[-1].content)]])
    client = create_in_process_client(model, output_type=Report)
    default = await client.run("a", session_id=f"{session_id}-1")
    listed = await client.run("b", session_id=f"{session_id}-2", output_type=list[int])
    text = await client.run("c", session_id=f"{session_id}-3", output_type=str)
    assert default.output == EXPECTED
    assert listed.output == [3, 4]
    assert text.status == "completed" and text.output == "plain words"
    assert [r.output_schema for r in model.requests] == [
        Report.model_json_schema(),
        {"type": "array", "items": {"type": "integer"}},
        None,
    ]
    assert "response_format" not in model.requests[2].body(), "plain text sends the body it always sent"


@tool
def file_report(title: str) -> str:
    """Files a report, once someone says yes."""
    if current_answer() is None:
        return suspend(f"May I file {title}?")
    return f"filed {title}"


async def test_a_resumed_run_keeps_the_output_type_it_is_given(session_id):
    """The type is not stored with the session: ``resume`` takes it again, as ``run`` did."""
    model = ScriptedModel([{"tool_calls": [{"name": "file_report", "arguments": {"title": "disk full"}}]}, FENCED])
    client = create_in_process_client(model)
    async with await Toolkit.load(tools=[file_report]) as toolkit:
        pending = await client.run("triage", toolkit, session_id=session_id, output_type=Report)
        assert pending.status == "pending" and pending.output is None, pending.error
        answer = Answer(id=pending.request.id, ok=True)
        resumed = await client.resume(session_id, answer, toolkit, output_type=Report)
    assert resumed.status == "completed", resumed.error
    assert resumed.output == EXPECTED and isinstance(resumed.output, Report)
    assert resumed.text.strip() == FENCED and model.requests[1].output_schema == Report.model_json_schema()


async def test_ask_takes_an_output_type_per_exchange(session_id):
    model = ScriptedModel([VALID, "[1, 2]"])
    client = create_in_process_client(model, output_type=Report)
    first = await client.ask("triage", conversation_id=session_id)
    second = await client.ask("and the counts?", conversation_id=session_id, output_type=list[int])
    assert (first.output, second.output) == (EXPECTED, [1, 2]), (first.error, second.error)
    assert [r.output_schema for r in model.requests] == [
        Report.model_json_schema(),
        {"type": "array", "items": {"type": "integer"}},
    ]


async def test_no_output_type_leaves_output_empty_and_the_body_unchanged(session_id):
    model = ScriptedModel([VALID])
    result = await create_in_process_client(model).run("a", session_id=session_id)
    assert result.output is None and result.text == VALID
    assert model.requests[0].response_format is None and "response_format" not in model.requests[0].body()


@pytest.mark.slow
async def test_outputs_survive_the_flow_result_in_and_out_of_a_subflow(session_id):
    model = ScriptedModel([VALID, "[1, 2, 3]", '{"x": 1, "y": 2}', VALID])
    client = create_in_process_client(model)

    @flow
    async def pipeline() -> tuple[Report, list[int], Point, Report]:
        report = await client.run("a", session_id=f"{session_id}-1", output_type=Report)
        numbers = await client.run("b", session_id=f"{session_id}-2", output_type=list[int])
        point = await client.run("c", session_id=f"{session_id}-3", output_type=Point)
        inline = await client.run("d", session_id=f"{session_id}-4", output_type=Report, subflow=False)
        return report.output, numbers.output, point.output, inline.output

    state = await pipeline(return_state=True)
    assert state.is_completed(), state.message
    assert await state.aresult() == (EXPECTED, [1, 2, 3], Point(1, 2), EXPECTED)


async def test_a_type_pydantic_cannot_validate_fails_before_anything_runs(session_id):
    model = ScriptedModel([VALID])
    with pytest.raises(OutputError, match=r"^output: Thread cannot be an output type: Unable to generate"):
        await create_in_process_client(model).run("a", session_id=session_id, output_type=threading.Thread)
    assert model.calls == 0


async def test_agent_job_returns_the_validated_value():
    from nexusflow.job import agent_job

    state = await agent_job(prompt="triage", script=[FENCED], output_type="test_output:Report", return_state=True)
    assert state.is_completed(), state.message
    assert await state.aresult() == {"title": "disk full", "severity": 2}

    state = await agent_job(prompt="triage", script=['"5, 6"'] * 3, output_type="test_output:Point", return_state=True)
    assert state.is_failed()
    assert state.message.endswith(
        "Error: output: the final answer does not match Point after 2 repairs: Input should be an object"
    )

    state = await agent_job(prompt="triage", script=[VALID], output_type="test_output:Nope", return_state=True)
    assert state.is_failed()
    assert state.message.endswith(
        "OutputError: output: test_output:Nope cannot be an output type: test_output has no 'Nope'"
    )


def test_the_readme_snippet_runs():
    namespace: dict[str, object] = {"__name__": "readme_typed_output"}
    exec(compile(block("typed-output"), "typed-output", "exec"), namespace)
    result = namespace["result"]
    assert isinstance(result, RunResult) and result.status == "completed", result
    assert type(result.output).__name__ == "Triage" and result.output.severity == 2


def test_request_keeps_response_format_in_its_body():
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [],
        "response_format": {"type": "json_schema", "json_schema": {"name": "R", "schema": {"type": "integer"}}},
    }
    request = ModelRequest.model_validate(body)
    assert request.body() == body and request.output_schema == {"type": "integer"}
