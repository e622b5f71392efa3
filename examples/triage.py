"""A typed triage report from a job you can schedule: the agent reads the open issues with a
tool, answers with a ``TriageReport`` (validated, so a malformed answer is sent back), and a
downstream task acts on the report's fields.

    python examples/triage.py                  # the bundled scripted model, no network
    python examples/triage.py --real           # your Claude Code (`claude` logged in) instead
    python examples/triage.py --session ID     # killed? the same command resumes: nothing runs twice

The switch is one line in ``triage``:

    client = create_cli_client(CliStyles.CLAUDE, "claude") if REAL else create_in_process_client(scripted())

To run it every morning, serve the flow instead of calling it (then start runs from the UI):

    triage.serve(name="morning-triage", cron="0 6 * * *")
"""

import sys
from typing import Literal

import anyio
from prefect import flow, task
from pydantic import BaseModel

from nexusflow import CliStyles, Toolkit, choose_server, create_cli_client, create_in_process_client, tool
from nexusflow.testing import ScriptedModel

REAL = "--real" in sys.argv
SESSION = sys.argv[sys.argv.index("--session") + 1] if "--session" in sys.argv else None
"""Without a session id of its own, each start of the script is a new run."""


class Issue(BaseModel):
    number: int
    title: str
    severity: Literal["urgent", "normal", "later"]


class TriageReport(BaseModel):
    summary: str
    issues: list[Issue]


@tool
def open_issues() -> list[dict[str, object]]:
    """The repository's open issues, newest first."""
    return [
        {"number": 42, "title": "Login fails on Safari", "comments": 9},
        {"number": 41, "title": "Typo in the settings page", "comments": 0},
        {"number": 40, "title": "Export to CSV drops the last row", "comments": 3},
    ]


def scripted() -> ScriptedModel:
    """Reads the issues, then answers with the report as JSON."""
    report = TriageReport(
        summary="One urgent regression, one data bug, one cosmetic fix.",
        issues=[
            Issue(number=42, title="Login fails on Safari", severity="urgent"),
            Issue(number=40, title="Export to CSV drops the last row", severity="normal"),
            Issue(number=41, title="Typo in the settings page", severity="later"),
        ],
    )
    return ScriptedModel([{"tool_calls": [{"name": "open_issues", "arguments": {}}]}, report.model_dump_json()])


@task
def page_on_call(report: TriageReport) -> list[str]:
    """The typed report drives code, not a person reading prose."""
    return [f"paged: #{issue.number} {issue.title}" for issue in report.issues if issue.severity == "urgent"]


@flow(name="triage")
async def triage() -> TriageReport:
    client = create_cli_client(CliStyles.CLAUDE, "claude") if REAL else create_in_process_client(scripted())
    async with Toolkit([open_issues]) as toolkit:
        result = await client.run("Triage the open issues.", toolkit, session_id=SESSION, output_type=TriageReport)
    if result.output is None:
        raise RuntimeError(f"triage failed: {result.error}")
    for line in page_on_call(result.output):
        print(line)
    return result.output


if __name__ == "__main__":
    choose_server()  # before the flow starts its own: the home's `nexusflow server` if one runs
    report = anyio.run(triage)
    print(report.summary)
    for issue in report.issues:
        print(f"#{issue.number} [{issue.severity}] {issue.title}")
