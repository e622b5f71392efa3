"""Ten topics researched at once with ``client.map``, then one agent writes the synthesis
from the ten results. In the Prefect UI the flow ``research`` holds ten ``member-<session>``
task runs, each with its ``agent_run`` subflow (at most four running at a time), and the
synthesiser's subflow after them.

    python examples/research_fanout.py           # the bundled scripted model, no network
    python examples/research_fanout.py --real    # your Claude Code (`claude` logged in) instead

The switch is one line in ``research``:

    client = create_cli_client(CliStyles.CLAUDE, "claude") if REAL else create_in_process_client(scripted)

With a ``session_id`` the batch resumes: run it again after a crash and the finished
topics replay without a model call. A topic that fails is a failed result; the others go on.
"""

import sys

import anyio
from prefect import flow

from nexusflow import CliStyles, ModelRequest, choose_server, create_cli_client, create_in_process_client

REAL = "--real" in sys.argv

TOPICS = [
    "durable execution",
    "tool calling",
    "MCP",
    "ACP",
    "prompt caching",
    "rate limits",
    "evals",
    "sandboxing",
    "structured output",
    "agent handoffs",
]


def finding(request: ModelRequest) -> str:
    topic = (request.messages[-1].content or "").removeprefix("In one sentence, what matters most about ")
    return f"{topic.rstrip('?')}: the one thing that matters."


def synthesis(request: ModelRequest) -> str:
    findings = (request.messages[-1].content or "").splitlines()[1:]
    return f"Synthesis of {len(findings)} findings, first: {findings[0]}"


def scripted(request: ModelRequest) -> str:
    """Answers a research prompt with its finding and the synthesis prompt with the
    synthesis, whichever run asks (a ``ScriptedModel`` plays one reply per turn of a run)."""
    prompt = request.messages[-1].content or ""
    return synthesis(request) if prompt.startswith("Write a synthesis") else finding(request)


@flow(name="research")
async def research(topics: list[str]) -> str:
    client = create_cli_client(CliStyles.CLAUDE, "claude") if REAL else create_in_process_client(scripted)
    prompts = [f"In one sentence, what matters most about {topic}?" for topic in topics]
    results = await client.map(prompts, max_concurrency=4)
    findings = [result.text if result.status == "completed" else f"(failed: {result.error})" for result in results]
    print("\n".join(f"- {line}" for line in findings))
    summary = await client.run("Write a synthesis of these findings:\n" + "\n".join(findings))
    return summary.text or f"synthesis failed: {summary.error}"


if __name__ == "__main__":
    choose_server()  # before the flow starts its own: the home's `nexusflow server` if one runs
    print(anyio.run(research, TOPICS))
