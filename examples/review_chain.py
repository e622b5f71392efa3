"""A writer agent with a reviewer agent as a tool (``client.as_tool``): the writer drafts,
asks the reviewer, and revises with the review. The reviewer's run is a flow run nested in
the writer's ``tool-0-reviewer`` task run, with the session ``<writer's session>.0.0``, so a
crash anywhere resumes inside the writer's resume without paying for a finished turn twice.

    python examples/review_chain.py           # the bundled scripted models, no network
    python examples/review_chain.py --real    # your Claude Code (`claude` logged in) instead

The switch is one line in ``main``, for both agents (they may also differ: a Codex writer
with a Claude Code reviewer, say):

    writer, reviewer = (real(), real()) if REAL else (scripted_writer(), scripted_reviewer())
"""

import sys

import anyio
from pydantic import BaseModel

from nexusflow import Client, CliStyles, ModelRequest, Toolkit, create_cli_client, create_in_process_client
from nexusflow.testing import ScriptedModel

REAL = "--real" in sys.argv

DRAFT = "Our agents compose: one agent calls another as a tool, and a crash resumes both of them."


class Review(BaseModel):
    approved: bool
    advice: str


def real() -> Client:
    return create_cli_client(CliStyles.CLAUDE, "claude")


def scripted_reviewer() -> Client:
    review = Review(approved=True, advice="Lead with the benefit: nothing is paid for twice.")
    return create_in_process_client(ScriptedModel([review.model_dump_json()]))


def revise(request: ModelRequest) -> str:
    review = Review.model_validate_json(request.messages[-1].content or "{}")
    return f"{DRAFT} Nothing is paid for twice. (review: {review.advice})"


def scripted_writer() -> Client:
    ask = {"tool_calls": [{"name": "reviewer", "arguments": {"prompt": f"Review this sentence: {DRAFT}"}}]}
    return create_in_process_client(ScriptedModel([ask, revise]))


async def main() -> None:
    writer, reviewer = (real(), real()) if REAL else (scripted_writer(), scripted_reviewer())
    tools = Toolkit(
        [
            reviewer.as_tool(
                name="reviewer",
                description="A careful editor: send it a draft, get back whether it is approved and advice.",
                output_type=Review,
            )
        ]
    )
    result = await writer.run("Write one sentence about composing agents; have it reviewed first.", tools)
    print(result.status, result.text)


if __name__ == "__main__":
    anyio.run(main)
