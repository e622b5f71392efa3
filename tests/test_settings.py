"""``NEXUSFLOW_*`` environment variables set a client's defaults: an argument wins over the
environment, the environment over the default, and a bad value is refused by its name."""

import pytest

from nexusflow import create_in_process_client
from nexusflow.errors import ArgumentError


def answer(request: object) -> str:
    return "done"


def test_without_the_environment_the_defaults_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NEXUSFLOW_MAX_TURNS", "NEXUSFLOW_MODEL_RETRIES", "NEXUSFLOW_OUTPUT_RETRIES"):
        monkeypatch.delenv(name, raising=False)
    options = create_in_process_client(answer).options
    assert (options.max_turns, options.model_retries, options.output_retries) == (20, 0, 2)


def test_the_environment_sets_what_the_arguments_leave_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUSFLOW_MAX_TURNS", "7")
    monkeypatch.setenv("NEXUSFLOW_MODEL_RETRIES", "3")
    monkeypatch.setenv("NEXUSFLOW_MODEL_RETRY_WAIT", "0.25")
    monkeypatch.setenv("NEXUSFLOW_OUTPUT_RETRIES", "0")
    options = create_in_process_client(answer).options
    assert (options.max_turns, options.model_retries, options.model_retry_wait, options.output_retries) == (
        7,
        3,
        0.25,
        0,
    )
    assert create_in_process_client(answer, max_turns=3, model_retries=0).options.max_turns == 3
    assert create_in_process_client(answer, max_turns=3, model_retries=0).options.model_retries == 0


def test_the_environment_is_read_when_a_client_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUSFLOW_MAX_TURNS", "4")
    first = create_in_process_client(answer)
    monkeypatch.setenv("NEXUSFLOW_MAX_TURNS", "5")
    assert (first.options.max_turns, create_in_process_client(answer).options.max_turns) == (4, 5)


@pytest.mark.parametrize(
    ("value", "why"),
    [("many", "input should be a valid integer"), ("0", "input should be greater than or equal to 1")],
)
def test_a_bad_value_is_refused_by_the_variables_name(monkeypatch: pytest.MonkeyPatch, value: str, why: str) -> None:
    monkeypatch.setenv("NEXUSFLOW_MAX_TURNS", value)
    with pytest.raises(ArgumentError) as refused:
        create_in_process_client(answer)
    assert str(refused.value).startswith(f"NEXUSFLOW_MAX_TURNS: {why}")
    assert refused.value.argument == "NEXUSFLOW_MAX_TURNS"
