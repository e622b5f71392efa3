"""One vocabulary of options: the factories' keyword options as a type checker sees them
(``ClientKeywords``, kept to ``ClientOptions``' fields, checked by ``mypy``), and the run's
flags in one table with one spelling (``nexusflow.config.run_flags``)."""

import inspect
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nexusflow.cli_client import STYLE_FIELDS, CliClientKeywords, StyleFields
from nexusflow.client import ClientKeywords, OptionsUpdate
from nexusflow.config.options import ClientOptions
from nexusflow.config.run_flags import RUN_FLAGS
from nexusflow.transports.oneshot import CliStyle

from helpers.command import nexusflow_here

NAMED = {"model", "output_type", "subscription"}
"""Options the factories take by name (``model``, ``output_type``) or build (``subscription``,
from ``limit``, ``max_concurrent`` and ``per_minute``)."""


def keys(typed: type) -> set[str]:
    return set(typed.__required_keys__ | typed.__optional_keys__)


def test_the_factories_keywords_are_the_client_options_they_do_not_take_by_name() -> None:
    assert keys(ClientKeywords) == set(ClientOptions.model_fields) - NAMED
    assert keys(OptionsUpdate) == set(ClientOptions.model_fields)


def test_the_cli_factory_also_takes_a_custom_styles_fields() -> None:
    assert keys(CliClientKeywords) == keys(ClientKeywords) | keys(StyleFields)
    assert set(STYLE_FIELDS) == keys(StyleFields) <= set(CliStyle.model_fields)


CHECKED = """\
from nexusflow import CliStyles, create_cli_client, create_in_process_client


def model(request: object) -> dict[str, str]:
    return {{"content": "hi"}}


create_in_process_client(model, {option}=3)
create_cli_client(CliStyles.CUSTOM, "my-cli", {option}=3, prompt_mode="arg")
create_in_process_client(model).with_options({option}=3)
"""


def mypy(tmp_path: Path, option: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "program.py"
    program.write_text(CHECKED.format(option=option))
    return subprocess.run(
        # one cache for both runs: the second checks only the program again, not nexusflow and Prefect
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), program],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_mypy_strict_refuses_a_misspelled_option_and_takes_the_right_one(tmp_path: Path) -> None:
    wrong = mypy(tmp_path, "max_turn")
    assert wrong.returncode == 1, wrong.stdout
    for line in ("program.py:8", "program.py:9", "program.py:10"):
        assert f'{line}: error: Unexpected keyword argument "max_turn"' in wrong.stdout, wrong.stdout
    right = mypy(tmp_path, "max_turns")
    assert right.returncode == 0, right.stdout


def _documented(function: Callable[..., object]) -> list[str]:
    """The parameters a numpydoc docstring describes, in order (Cyclopts' help comes from it)."""
    section = (function.__doc__ or "").split("Parameters\n    ----------\n")[1]
    return re.findall(r"^    (\w+)$", section, flags=re.MULTILINE)


def test_the_run_flags_the_stored_invocation_and_the_jobs_parameters_are_the_tables() -> None:
    from nexusflow.command.invocation import Invocation
    from nexusflow.command.run import run
    from nexusflow.job import agent_job

    flags = [flag.name for flag in RUN_FLAGS if flag.command]
    earlier = [flag.was for flag in RUN_FLAGS if flag.was is not None]
    keywords = [p.name for p in inspect.signature(run).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert keywords == flags + earlier, "run's flags, then the earlier spellings it still takes"
    assert _documented(run) == ["prompt", *flags]
    assert set(Invocation.model_fields) == {flag.name for flag in RUN_FLAGS if flag.stored}
    job = set(inspect.signature(agent_job.fn).parameters) - {"prompt"}
    assert job == {flag.name for flag in RUN_FLAGS if flag.job}


def test_an_earlier_spelling_of_a_flag_still_works_and_says_the_new_one(capsys: pytest.CaptureFixture[str]) -> None:
    done = nexusflow_here(capsys, "run", "hi", "--mcp", "no-such-mcp.json", "--system", "terse")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[:3] == [
        "nexusflow: --mcp is deprecated: use --mcp-config",
        "nexusflow: --system is deprecated: use --system-prompt",
        f"nexusflow: --mcp-config: cannot read {Path('no-such-mcp.json').absolute()}: No such file or directory",
    ]


def test_a_session_stored_with_the_earlier_spellings_reads_as_it_was_written() -> None:
    from nexusflow.command.invocation import Invocation

    stored = Invocation.model_validate({"mcp": "/m.json", "skills": "/s", "system": "terse", "max_turns": 3})
    assert (stored.mcp_config, stored.skills_dir, stored.system_prompt) == ("/m.json", "/s", "terse")
    assert stored.over({"system_prompt": "long"}).system_prompt == "long"
