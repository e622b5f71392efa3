"""What a run's flow run shows beside its task runs: the summary artifact (every step and
the metrics), the progress artifact, and the log line saying how to answer a pending run;
read back from the session's Prefect server."""

import anyio
import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.objects import Artifact

from nexusflow import RunResult, Toolkit, create_in_process_client, suspend, tool
from nexusflow._prefect.artifact_keys import artifact_key
from nexusflow.flows.report import Progress
from nexusflow.testing import ScriptedModel

from helpers.prefect_api import flow_run_logs

pytestmark = [pytest.mark.anyio]


@tool
def lookup(city: str) -> str:
    """Look a city up; there is no Atlantis."""
    if city == "Atlantis":
        raise LookupError("no such city")
    return f"{city}: 12 C"


@tool
async def progress_now(key: str) -> str:
    """What the run's progress artifact says right now (the run reads its own page)."""
    async with get_client() as client:
        found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return f"{found[0].data}% {found[0].description}"


@tool
async def slow() -> str:
    """Takes longer than the progress artifact's update interval."""
    await anyio.sleep(1.2)
    return "slept"


@tool
def launch() -> str:
    """Asks first."""
    return suspend("May I launch?")


async def artifacts(key: str, flow_run_id: str) -> list[Artifact]:
    async with get_client() as client:
        found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return [item for item in found if str(item.flow_run_id) == flow_run_id]


async def artifact(key: str, flow_run_id: str) -> Artifact:
    mine = await artifacts(key, flow_run_id)
    assert len(mine) == 1, [(item.key, item.flow_run_id) for item in mine]
    return mine[0]


async def test_the_summary_lists_every_step_and_the_metrics(session_id):
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "lookup", "arguments": {"city": "Oslo"}},
                    {"name": "lookup", "arguments": {"city": "Atlantis"}},
                ]
            },
            "Oslo is 12 C; Atlantis is not a city.",
        ]
    )
    async with await Toolkit.load(tools=[lookup]) as toolkit:
        result = await create_in_process_client(model).run("weather?", toolkit, session_id=session_id)
    assert result.status == "completed", result.error

    summary = await artifact(artifact_key("summary", session_id), result.flow_run_id)
    assert summary.type == "markdown"
    markdown = str(summary.data)
    assert "| # | kind | step | status | seconds | replayed |" in markdown
    for row in (
        "| status | completed |",
        "| turns | 2 |",
        "| tool calls | 2 |",
        "| tool errors | 1 |",
        "| suspensions | 0 |",
        "| replayed turns | 0 |",
        "| launches | 0 |",
    ):
        assert row in markdown, row
    steps = [line.split(" | ")[1:5] for line in markdown.splitlines() if line.startswith("| ") and " | no |" in line]
    # The rows come from Steps.entries, filled by the task level (names, state names).
    assert sorted(step[:3] for step in steps) == [
        ["tool", "tool-0-lookup", "Completed"],
        ["tool", "tool-0-lookup-2", "ToolError"],
        ["turn", "turn-0", "Completed"],
        ["turn", "turn-1", "Completed"],
    ]

    transcript = await artifact(artifact_key("transcript", session_id), result.flow_run_id)
    assert "Oslo is 12 C" in str(transcript.data)


@pytest.mark.slow
async def test_the_progress_artifact_follows_the_turns(session_id):
    key = artifact_key("progress", session_id)
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "slow", "arguments": {}}]},
            {"tool_calls": [{"name": "progress_now", "arguments": {"key": key}}]},
            lambda request: request.messages[-1].content,
        ]
    )
    async with await Toolkit.load(tools=[slow, progress_now]) as toolkit:
        result = await create_in_process_client(model, max_turns=10).run("go", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "20% 2 of at most 10 turns", "updated after turn-1, a second after the start"

    progress = await artifact(key, result.flow_run_id)
    assert progress.type == "progress"
    assert progress.data == 100.0
    assert progress.description == "3 of at most 10 turns, completed"


@pytest.mark.slow
async def test_a_failed_run_has_its_summary_and_progress(session_id):
    model = ScriptedModel([{"tool_calls": [{"name": "slow", "arguments": {}}]}] * 3)
    async with await Toolkit.load(tools=[slow]) as toolkit:
        result = await create_in_process_client(model, max_turns=2).run("loop", toolkit, session_id=session_id)
    assert result.status == "failed"

    markdown = str((await artifact(artifact_key("summary", session_id), result.flow_run_id)).data)
    assert "| status | failed |" in markdown
    assert f"| error | {result.error} |" in markdown
    progress = await artifact(artifact_key("progress", session_id), result.flow_run_id)
    assert progress.data == 100.0 and progress.description == "2 of at most 2 turns, failed"


@pytest.mark.slow
async def test_a_pending_run_says_how_to_answer_it(session_id):
    model = ScriptedModel([{"tool_calls": [{"name": "launch", "arguments": {}}]}, "launched"])
    async with await Toolkit.load(tools=[launch]) as toolkit:
        result = await create_in_process_client(model, max_turns=4).run("go", toolkit, session_id=session_id)
    assert result.status == "pending"

    markdown = str((await artifact(artifact_key("summary", session_id), result.flow_run_id)).data)
    assert "| status | pending |" in markdown and "| waiting for | May I launch? |" in markdown

    hint = f"answer with: nexusflow answer {session_id} --approve|--deny"
    lines = await flow_run_logs(result.flow_run_id, hint)
    said = [(level, message) for level, message in lines if hint in message]
    assert said == [(20, f"run pending: May I launch? (request {session_id}.0.0); {hint}")]
    assert not [message for level, message in lines if level >= 40], "a pending run logs no ERROR"


async def test_a_run_over_within_its_first_interval_writes_no_progress(session_id):
    """The bar is for watching a run; a short one at scale saves the request."""

    @flow
    async def finish(interval: float) -> bool:
        progress = Progress(session_id, max_turns=4, interval=interval)
        await progress.finish(RunResult(status="completed", session_id=session_id))
        return progress.artifact is not None

    assert await finish(3600) is False
    assert await finish(0) is True


async def test_the_summary_shows_what_each_sub_agent_cost_on_its_call(session_id):
    def reviewer_model(request: object) -> dict[str, object]:
        return {"content": "fine", "usage": {"input_tokens": 40, "output_tokens": 4, "cost_usd": 0.03}}

    reviewer = create_in_process_client(reviewer_model).as_tool(name="reviewer", description="Review.")
    parent = create_in_process_client(
        ScriptedModel([{"tool_calls": [{"name": "reviewer", "arguments": {"prompt": "x"}}]}, "reviewed"])
    )
    result = await parent.run("go", Toolkit([reviewer]), session_id=session_id)
    assert result.status == "completed", result.error
    markdown = str((await artifact(artifact_key("summary", session_id), result.flow_run_id)).data)
    (row,) = [line for line in markdown.splitlines() if "| tool-0-reviewer |" in line]
    assert row.endswith("| tokens 40 in / 4 out · cost $0.03 |"), row
