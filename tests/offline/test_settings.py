"""``NEXUSFLOW_*`` environment variables set a client's defaults: an argument wins over the
environment, the environment over the default, and a bad value is refused by its name."""

import os

import pytest

from nexusflow import Client, CliStyles, create_cli_client, create_in_process_client
from nexusflow.config.settings import ENV_PREFIX, NexusflowSettings, settings
from nexusflow.config.waits import DeploymentSuspension, PrefectPause
from nexusflow.errors import AcpError, ArgumentError, CliError
from nexusflow.transports.choice import Transport
from nexusflow.transports.oneshot import CliTransport

from paths import REPO


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


def _clear(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("NEXUSFLOW_"):
            monkeypatch.delenv(name)


async def _opened(client: Client) -> CliTransport:
    async with client.transport(lambda line: None) as opened:
        assert isinstance(opened, CliTransport)
        return opened


@pytest.mark.anyio
async def test_the_environment_sets_a_cli_clients_transport_options(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear(monkeypatch)
    defaults = (await _opened(create_cli_client(CliStyles.CLAUDE, "claude"))).config
    assert (defaults.timeout, defaults.repair_budget, defaults.retry_on) == (300.0, 2, ())
    monkeypatch.setenv("NEXUSFLOW_TRANSPORT", "cli")
    monkeypatch.setenv("NEXUSFLOW_TIMEOUT", "0.5")
    monkeypatch.setenv("NEXUSFLOW_REPAIR_BUDGET", "0")
    monkeypatch.setenv("NEXUSFLOW_RETRY_ON", '["rate limit", "overloaded"]')  # or one pattern as it is
    config = (await _opened(create_cli_client(CliStyles.CLAUDE, "claude"))).config
    assert (config.timeout, config.repair_budget) == (0.5, 0)
    assert list(config.retry_on) == ["rate limit", "overloaded"]
    given = create_cli_client(CliStyles.CLAUDE, "claude", timeout=9, repair_budget=1, retry_on="busy")
    config = (await _opened(given)).config
    assert (config.timeout, config.repair_budget, list(config.retry_on)) == (9, 1, ["busy"])


@pytest.mark.anyio
async def test_the_environments_transport_is_the_one_a_client_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear(monkeypatch)
    monkeypatch.setenv("NEXUSFLOW_TRANSPORT", "acp")
    client = create_cli_client(CliStyles.CLAUDE, "claude")
    with pytest.raises(AcpError, match='style "claude" speaks ACP through an adapter'):
        await _opened(client)
    await _opened(create_cli_client(CliStyles.CLAUDE, "claude", transport=Transport.CLI))


def test_the_answer_policy_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear(monkeypatch)
    assert create_in_process_client(answer).options.wait_for is None
    monkeypatch.setenv("NEXUSFLOW_WAIT", "pause")
    monkeypatch.setenv("NEXUSFLOW_WAIT_TIMEOUT", "90")
    paused = create_in_process_client(answer).options.wait_for
    assert isinstance(paused, PrefectPause) and paused.timeout == 90
    monkeypatch.setenv("NEXUSFLOW_WAIT", "suspend")
    suspended = create_cli_client(CliStyles.CLAUDE, "claude").options.wait_for
    assert isinstance(suspended, DeploymentSuspension) and suspended.timeout == 90
    assert create_in_process_client(answer, wait_for=None).options.wait_for is None
    monkeypatch.setenv("NEXUSFLOW_WAIT", "none")
    assert create_in_process_client(answer).options.wait_for is None


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("NEXUSFLOW_TRANSPORT", "ssh", "input should be 'auto', 'acp' or 'cli'"),
        ("NEXUSFLOW_TIMEOUT", "0", "input should be greater than 0"),
        ("NEXUSFLOW_RETRY_ON", '["unclosed"', "not a JSON list of regular expressions"),
        ("NEXUSFLOW_RETRY_ON", "(unclosed", "cli: retry_on pattern '(unclosed' is not a regular expression"),
        ("NEXUSFLOW_WAIT", "forever", "input should be 'suspend', 'pause' or 'none'"),
    ],
)
def test_a_bad_transport_or_answer_setting_is_refused_by_its_name(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, why: str
) -> None:
    _clear(monkeypatch)
    monkeypatch.setenv(variable, value)
    with pytest.raises((ArgumentError, CliError)) as refused:
        create_cli_client(CliStyles.CLAUDE, "claude")
    assert str(refused.value).startswith(why if why.startswith("cli:") else f"{variable}: {why}"), str(refused.value)


def test_one_retry_pattern_needs_no_json(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear(monkeypatch)
    monkeypatch.setenv("NEXUSFLOW_RETRY_ON", "429|rate limit")
    assert settings().retry_on == ("429|rate limit",)


def test_the_commands_flags_left_out_take_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from nexusflow.command._invoked import client_of
    from nexusflow.command.invocation import Invocation

    _clear(monkeypatch)
    monkeypatch.setenv("NEXUSFLOW_MAX_TURNS", "3")
    monkeypatch.setenv("NEXUSFLOW_WAIT", "pause")
    options = client_of(Invocation()).options
    assert options.max_turns == 3 and isinstance(options.wait_for, PrefectPause)
    assert client_of(Invocation(max_turns=5)).options.max_turns == 5


def test_a_bad_setting_is_a_usage_error_of_the_command(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from nexusflow.command import main

    _clear(monkeypatch)
    monkeypatch.setenv("NEXUSFLOW_MAX_TURNS", "0")
    assert main(["run", "hi"]) == 2
    assert capsys.readouterr().err == (
        "nexusflow: NEXUSFLOW_MAX_TURNS: input should be greater than or equal to 1, not '0' (str)\n"
    )


def test_an_agent_jobs_parameters_left_out_take_the_environment() -> None:
    """A deployment's parameter form shows no default that would hide the work pool's setting."""
    from nexusflow.job import agent_job

    defaults = {name: spec.get("default") for name, spec in agent_job.parameters.properties.items()}
    assert {name: defaults[name] for name in ("max_turns", "transport", "wait", "wait_timeout")} == dict.fromkeys(
        ("max_turns", "transport", "wait", "wait_timeout")
    )


def test_the_quota_policy_is_set_by_the_environment_and_a_bad_one_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUSFLOW_ON_QUOTA", "wait")
    monkeypatch.setenv("NEXUSFLOW_MAX_QUOTA_WAIT", "600")
    options = create_in_process_client(answer).options
    assert (options.on_quota, options.max_quota_wait) == ("wait", 600.0)
    assert create_in_process_client(answer, on_quota="fail").options.on_quota == "fail"
    monkeypatch.setenv("NEXUSFLOW_ON_QUOTA", "retry")
    with pytest.raises(ArgumentError) as refused:
        create_in_process_client(answer)
    assert str(refused.value).startswith("NEXUSFLOW_ON_QUOTA: input should be 'fail', 'wait' or 'fallback'")


def test_every_setting_is_documented() -> None:
    """Each ``NEXUSFLOW_*`` variable is in the table of docs/tools-and-options.md, with the
    client option it sets where there is one."""
    table = (REPO / "docs" / "tools-and-options.md").read_text()
    missing = [name for name in NexusflowSettings.model_fields if f"`{ENV_PREFIX}{name.upper()}`" not in table]
    assert missing == []
