"""The examples in the README and examples/ keep working."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("quickstart.py", "completed 2 + 3 = 5"),
        ("compose.py", "- Prefect: three key facts, summarized.\n- MCP: three key facts, summarized."),
    ],
)
def test_example_runs(script, expected):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=300, env=os.environ.copy()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout
