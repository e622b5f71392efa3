"""The examples in examples/ keep working (the README's blocks: ``test_docs.py``)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("prefect_server")

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("quickstart.py", "completed 2 + 3 = 5"),
        ("compose.py", "- Prefect: three key facts, summarized.\n- MCP: three key facts, summarized."),
        (
            "triage.py",
            "paged: #42 Login fails on Safari\nOne urgent regression, one data bug, one cosmetic fix.\n"
            "#42 [urgent] Login fails on Safari\n#40 [normal] Export to CSV drops the last row\n"
            "#41 [later] Typo in the settings page\n",
        ),
        (
            "research_fanout.py",
            "- durable execution: the one thing that matters.\n- tool calling: the one thing that matters.\n"
            "- MCP: the one thing that matters.\n- ACP: the one thing that matters.\n"
            "- prompt caching: the one thing that matters.\n- rate limits: the one thing that matters.\n"
            "- evals: the one thing that matters.\n- sandboxing: the one thing that matters.\n"
            "- structured output: the one thing that matters.\n- agent handoffs: the one thing that matters.\n"
            "Synthesis of 10 findings, first: durable execution: the one thing that matters.\n",
        ),
        (
            "review_chain.py",
            "completed Our agents compose: one agent calls another as a tool, and a crash resumes both of them."
            " Nothing is paid for twice. (review: Lead with the benefit: nothing is paid for twice.)\n",
        ),
    ],
)
@pytest.mark.slow
def test_example_runs(script, expected):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=300, env=os.environ.copy()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout
