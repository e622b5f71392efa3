"""Usage and cost per run: a repair launch is paid for, a replayed turn is reported as replayed
and not spent again, an ACP agent's prompt response and usage updates give a turn's tokens
and cost (unknown when it reports none), and the sessions list what each cost. How each
CLI's own JSON output is read, and how usage adds up and is shown, is tested without a
server (tests/offline/test_usage_reading.py)."""

import pytest

from nexusflow import Toolkit, Transport, Usage, create_cli_client, create_in_process_client
from nexusflow.transports.oneshot.style import CliStyles

from cli_fixtures import envelope_answer, styled

pytestmark = pytest.mark.anyio


async def test_a_repair_launch_is_paid_for_too(fake, session_id):
    fake.script(styled("codex", '{"tool_calls": 3}'), styled("codex", envelope_answer("done")))
    client = create_cli_client(style=CliStyles.CODEX, command=fake.command, model="gpt-5")
    result = await client.run("go", session_id=session_id)
    assert result.status == "completed", result.error
    assert result.metrics.repairs == 1
    assert (result.metrics.usage.input_tokens, result.metrics.usage.output_tokens) == (20, 10)
    assert result.metrics.cost_usd is None and result.metrics.turns_without_cost == 1


async def test_a_replayed_turn_is_reported_as_replayed_not_spent_again(session_id):
    replies = iter([{"content": "four", "usage": {"input_tokens": 30, "output_tokens": 4}}])
    client = create_in_process_client(lambda request: next(replies))
    first = await client.run("2+2?", Toolkit([]), session_id=session_id)
    assert (first.metrics.usage.input_tokens, first.metrics.usage.output_tokens) == (30, 4)
    again = await client.run("2+2?", Toolkit([]), session_id=session_id)
    assert again.text == "four" and again.metrics.replayed_turns == 1
    assert again.metrics.usage == Usage() and again.metrics.turns_without_usage == 0
    assert (again.metrics.replayed_usage.input_tokens, again.metrics.replayed_usage.output_tokens) == (30, 4)


async def test_an_acp_turn_s_tokens_and_the_cost_its_usage_updates_state(agent, session_id):
    cost = {"sessionUpdate": "usage_update", "used": 900, "size": 200000, "_meta": {"_claude/model": "claude-x"}}
    agent.script(
        [
            [
                {"update": cost | {"cost": {"amount": 0.01, "currency": "USD"}}},
                {"say": "done"},
                {"update": cost | {"cost": {"amount": 0.025, "currency": "USD"}}},
                {"usage": {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17, "cachedReadTokens": 3}},
            ]
        ]
    )
    client = create_cli_client(style=agent.style, command=agent.command, transport=Transport.ACP, env=agent.env)
    result = await client.run("go", Toolkit([]), session_id=session_id)
    assert result.status == "completed", result.error
    usage = result.metrics.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (12, 5, 3)
    assert usage.cache_write_tokens is None, "not reported, so unknown"
    assert usage.cost_usd == pytest.approx(0.025) and result.metrics.models == ["claude-x"]


async def test_an_acp_agent_that_reports_nothing_leaves_the_usage_unknown(agent, session_id):
    agent.script([[{"say": "done"}]])
    client = create_cli_client(style=agent.style, command=agent.command, transport=Transport.ACP, env=agent.env)
    result = await client.run("go", Toolkit([]), session_id=session_id)
    assert result.status == "completed", result.error
    assert result.metrics.usage == Usage() and result.metrics.turns_without_usage == 1


async def test_sessions_list_what_each_session_cost_and_unknown_as_unknown(session_id):
    from nexusflow.ops.sessions import list_sessions

    paid = create_in_process_client(lambda request: {"content": "x", "usage": {"input_tokens": 7, "cost_usd": 0.25}})
    free = create_in_process_client(lambda request: "y")
    await paid.run("go", session_id=f"{session_id}-paid")
    await paid.run("go", session_id=f"{session_id}-paid")  # replayed: paid once, still the session's cost
    await free.run("go", session_id=f"{session_id}-free")
    listed = {info.session_id: info for info in await list_sessions()}
    assert (listed[f"{session_id}-paid"].cost_usd, listed[f"{session_id}-paid"].tokens) == (0.25, 7)
    assert (listed[f"{session_id}-free"].cost_usd, listed[f"{session_id}-free"].tokens) == (None, None)
