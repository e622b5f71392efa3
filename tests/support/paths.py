"""Where the tests find the repository's parts, from any test folder."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
SUPPORT = TESTS / "support"
HELPERS = SUPPORT / "helpers"
"""The scripts tests run as child processes, and the helpers they import."""
CASSETTES = TESTS / "cassettes"
EXAMPLES = REPO / "examples"
BENCHMARKS = REPO / "benchmarks"
"""The benchmarks, scripts of their own (no package): the soak's tests run and import ``soak``."""
