"""The lock a process holds per budget holder while it counts a turn's spend: runs of one
process counting at once lose no turn, and a process that serves runs for weeks keeps no lock
of a session it is done with."""

import gc

import anyio
import pytest

from nexusflow import Usage
from nexusflow.state import budget
from nexusflow.state.budget import Budget, Holder, count, spent

pytestmark = [pytest.mark.anyio]


async def test_turns_counted_at_once_are_all_counted_and_no_lock_stays():
    holders = [Holder(f"budget-locks-{n}", Budget(max_tokens=10_000)) for n in range(20)]
    cent = Usage(input_tokens=10, output_tokens=1, cost_usd=0.01)

    async with anyio.create_task_group() as group:
        for holder in holders:
            for turn in range(5):
                group.start_soon(count, holder, f"turn-{turn}", cent)
            group.start_soon(count, holder, "turn-0", cent)  # a replayed turn: counted once

    for holder in holders:
        assert (await spent(holder.session_id)).cost_usd == pytest.approx(0.05)
    gc.collect()
    assert len(budget._locks) == 0
