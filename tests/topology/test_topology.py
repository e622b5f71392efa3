"""Beyond one machine (issue 12), on the loopback topology of tests/support/topology.py: a Prefect
server on PostgreSQL, results in an S3 bucket through the S3Bucket block, two process
workers (machines A and B) that share nothing else.

- A deployment run killed on A (SIGKILL of its flow process) is resumed on B by a new run
  of the deployment with the same ``session_id``: finished steps replay, no finished tool
  runs again, the answer is right.
- A run suspended on A is answered by ``nexusflow answer`` from a third machine and
  finishes on B.
- No nexusflow state is left on any machine: it is all in the bucket.
- A subscription limit holds across both machines: six runs, at most two turns in flight.

A test pins a run to one machine by freezing the other's worker (SIGSTOP) while the run is
handed out, as if that machine were off.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.deployments import run_deployment

from helpers.intervals import most_in_flight
from paths import HELPERS
from topology import DEPLOYMENT, RESULTS, SIDE_EFFECTS, Machine, Topology, free_port, topology_fixture  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600), pytest.mark.xdist_group("heavy")]
SLOW_CLI = HELPERS / "topology_tools.py"
TOOLS = f"{SLOW_CLI}:TOOLS"
SESSIONS: list[str] = []
"""The sessions the runs of this module used, for the test that looks for their state."""
PREFECT_OWN = ["tmp/prefect-workspace-attempt-*/workspace.json", "tmp/prefect-workspace-attempt-*/supervisor.json"]
"""The only files a machine may hold after its runs: Prefect's own record of a run attempt."""


@contextmanager
def only_on(machine: Machine, others: list[Machine]) -> Iterator[None]:
    """Runs handed out inside go to ``machine``: the other machines are frozen meanwhile."""
    for other in others:
        other.freeze()
    try:
        yield
    finally:
        for other in others:
            other.thaw()


async def state_of(flow_run_id: UUID) -> State:
    async with get_client() as client:
        state = (await client.read_flow_run(flow_run_id)).state
    assert state is not None
    return state


async def wait_for_state(flow_run_id: UUID, check: Callable[[State], bool], timeout: float = 180) -> State:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = await state_of(flow_run_id)
        if check(state):
            return state
        await anyio.sleep(0.5)
    raise AssertionError(f"flow run {flow_run_id} stayed {await state_of(flow_run_id)}")


def executions(topology: Topology, session: str) -> list[dict[str, Any]]:
    """What the tools really did, from their own log in the side-effect bucket."""
    s3 = topology.s3()
    found = []
    for key in topology.keys(SIDE_EFFECTS, f"runs/{session}/"):
        found.append(json.loads(s3.get_object(Bucket=SIDE_EFFECTS, Key=key)["Body"].read()))
    return found


async def wait_for_execution(topology: Topology, session: str, n: int, event: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in executions(topology, session):
            if entry["n"] == n and entry["event"] == event:
                return entry
        await anyio.sleep(0.5)
    raise AssertionError(f"step {n} never recorded {event!r}; the tools recorded {executions(topology, session)}")


def where(topology: Topology, session: str) -> dict[tuple[int, str], list[str]]:
    """(step, event) -> the machines it happened on."""
    machines = {str(machine.home): name for name, machine in topology.machines.items()}
    seen: dict[tuple[int, str], list[str]] = {}
    for entry in executions(topology, session):
        seen.setdefault((entry["n"], entry["event"]), []).append(machines[entry["home"]])
    return {place: sorted(names) for place, names in seen.items()}


def call(session: str, n: int, **more: Any) -> str:
    return f"call step {json.dumps({'session': session, 'n': n, **more})}"


async def test_a_run_killed_on_machine_a_resumes_on_machine_b(topology: Topology) -> None:
    a, b = topology.machines["a"], topology.machines["b"]
    session = f"killed-{uuid.uuid4().hex[:8]}"
    SESSIONS.append(session)
    prompt = "\n\n".join([call(session, 1), call(session, 2), call(session, 3, gate=session)])
    parameters = {"prompt": prompt, "tools": [TOOLS], "session_id": session}
    started = time.monotonic()

    with topology.api():
        with only_on(a, [b]):
            first = await run_deployment(DEPLOYMENT, parameters=parameters, timeout=0)
            step3 = await wait_for_execution(topology, session, 3, "start")
        assert step3["home"] == str(a.home)
        steps = f"nexusflow/sessions/{session}/steps/"
        stored = topology.keys(RESULTS, steps)
        assert {tuple(key.removeprefix(steps).split("/")[0:2]) for key in stored} >= {
            ("0", "turn"),
            ("0", "tool"),
            ("1", "tool"),
            ("2", "turn"),
        }
        os.kill(step3["pid"], signal.SIGKILL)
        crashed = await wait_for_state(first.id, lambda s: s.is_final() or s.is_crashed(), timeout=60)
        assert crashed.is_crashed(), crashed

        # The operator starts the session again; A is off, B takes it.
        topology.s3().put_object(Bucket=SIDE_EFFECTS, Key=f"gates/{session}", Body=b"")
        with only_on(b, [a]):
            second = await run_deployment(DEPLOYMENT, parameters=parameters, timeout=0)
            done = await wait_for_state(second.id, lambda s: s.is_final())
        assert done.is_completed(), done
        result = await done.aresult()

    assert result.text == "step: 1\nstep: 4\nstep: 9"
    assert (result.metrics.replayed_turns, result.metrics.replayed_tool_calls) == (3, 2)
    assert where(topology, session) == {
        (1, "start"): ["a"],
        (1, "end"): ["a"],
        (2, "start"): ["a"],
        (2, "end"): ["a"],
        (3, "start"): ["a", "b"],
        (3, "end"): ["b"],
    }, "steps 1 and 2 ran once, on A; step 3 was cut on A and ran whole on B"
    print(f"\nkill on A, resume on B: {time.monotonic() - started:.1f}s")


async def test_a_run_suspended_on_a_is_answered_elsewhere_and_finishes_on_b(topology: Topology) -> None:
    a, b = topology.machines["a"], topology.machines["b"]
    session = f"suspended-{uuid.uuid4().hex[:8]}"
    SESSIONS.append(session)
    parameters = {"prompt": call(session, 7), "tools": [TOOLS], "session_id": session, "approval": ["step"]}
    started = time.monotonic()

    with topology.api():
        with only_on(a, [b]):
            run = await run_deployment(DEPLOYMENT, parameters=parameters, timeout=0)
            suspended = await wait_for_state(run.id, lambda s: s.is_paused() or s.is_final())
        assert suspended.name == "Suspended", suspended
        assert str(run.id) in (topology.root / "worker-a.log").read_text()

        with only_on(b, [a]):
            operator = topology.root / f"operator-{session}"
            operator.mkdir()
            env = {**topology.env, "HOME": str(operator), "PREFECT_HOME": str(operator / ".prefect")}
            answer = subprocess.run(
                [sys.executable, "-m", "nexusflow", "answer", str(run.id), "--approve"],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
                cwd=operator,
            )
            assert answer.returncode == 0, answer.stderr[-3000:]
            done = await wait_for_state(run.id, lambda s: s.is_final())
        assert done.is_completed(), done
        result = await done.aresult()

    assert str(run.id) in (topology.root / "worker-b.log").read_text()
    assert result.text == "step: 49"
    assert where(topology, session) == {(7, "start"): ["b"], (7, "end"): ["b"]}, "the approved tool ran once, on B"
    print(f"\nsuspend on A, answer elsewhere, finish on B: {time.monotonic() - started:.1f}s")


def leftovers(machine: Machine) -> list[str]:
    """Every file in the machine's HOME (PREFECT_HOME and the default local result path
    inside), working directory and TMPDIR that is not Prefect's own."""
    files = {path.relative_to(machine.root) for path in machine.root.rglob("*") if not path.is_dir()}
    own = {path for path in files if any(path.match(pattern) for pattern in PREFECT_OWN)}
    return sorted(str(path) for path in files - own)


async def test_no_machine_keeps_run_state_it_is_all_in_the_bucket(topology: Topology) -> None:
    """Fails if any nexusflow code writes run state outside result storage: after runs on
    both machines (this module's, or one of its own when it runs alone), no machine holds a
    file of its own, and the bucket holds each session's records and steps."""
    if not SESSIONS:
        session = f"alone-{uuid.uuid4().hex[:8]}"
        SESSIONS.append(session)
        with topology.api():
            run = await run_deployment(DEPLOYMENT, parameters={"prompt": call(session, 2), "tools": [TOOLS]}, timeout=0)
            assert (await wait_for_state(run.id, lambda s: s.is_final())).is_completed()
            SESSIONS[-1] = f"job-{run.id}"  # the job's own session: no session_id given
    for machine in topology.machines.values():
        kept = leftovers(machine)
        assert kept == [], f"machine {machine.name} kept files outside result storage: {kept}"
        assert not machine.local_storage.exists()

    records = topology.keys(RESULTS)
    for session in SESSIONS:
        ours = {key.split("/")[-1] for key in records if key.startswith(f"nexusflow/sessions/{session}/")}
        assert {"session.json", "lease.json", "status.json"} <= ours, sorted(records)
        assert any(key.startswith(f"nexusflow/sessions/{session}/steps/0/turn/") for key in records), sorted(records)


async def test_our_records_on_s3_round_trip_and_a_missing_one_reads_as_none(topology: Topology) -> None:
    """boto reports a missing key as a ``ClientError`` (404): that is no record, while any
    other failure of the store (here, a server that does not answer) is a ``StorageError``."""
    from prefect_aws import S3Bucket

    from nexusflow._prefect.session_lock import Heartbeat
    from nexusflow._prefect.storage import holding, read_record, write_record
    from nexusflow.errors import StorageError

    beat = Heartbeat(session_id="s3-records", flow_run_id=str(uuid.uuid4()), lock_id=str(uuid.uuid4()), beat=3)
    with topology.api():
        bucket = await S3Bucket.aload("nexusflow-results")
        assert await read_record(Heartbeat, "sessions", "never-ran", "lease.json", storage=bucket) is None
        with holding("s3-records"):
            await write_record(beat, "sessions", "s3-records", "lease.json", storage=bucket)
        assert await read_record(Heartbeat, "sessions", "s3-records", "lease.json", storage=bucket) == beat
        closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        elsewhere = bucket.model_copy(deep=True)
        elsewhere.credentials.aws_client_parameters.endpoint_url = closed
        elsewhere.credentials.aws_client_parameters.config = {"retries": {"max_attempts": 1}}
        with pytest.raises(StorageError, match="could not read nexusflow/sessions/s3-records/lease.json"):
            await read_record(Heartbeat, "sessions", "s3-records", "lease.json", storage=elsewhere)
    assert "nexusflow/sessions/s3-records/lease.json" in topology.keys(RESULTS, "nexusflow/")


async def test_a_subscription_limit_holds_across_both_machines(topology: Topology) -> None:
    """Six runs of the deployment, three handed to each machine, each one two-second turn
    of a slow agent CLI, with ``max_concurrent=2`` on a limit of their own. The CLI records
    its launch, then waits at a gate: once two turns are launched, two seconds pass and no
    third is (without the limit, all six would be at the gate). With the gate open, at no
    moment are more than two turns in flight from launch to end, by the CLI's own record in
    the side-effect bucket, and two are (the limit is two slots, not one). A turn's interval
    starts at its launch, not at the gate: on a loaded machine the CLI's start takes longer
    than its turn (CI, 2026-12-05), so counted from the gate the turns never overlapped."""
    tag = f"limited-{uuid.uuid4().hex[:8]}"
    cli = topology.root / f"slow-cli-{tag}"
    cli.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(SLOW_CLI))} "$@"\n')
    cli.chmod(0o755)
    parameters = {
        "prompt": f"slow turn {tag}",
        "style": "claude",
        "command": str(cli),
        "transport": "cli",
        "limit": tag,
        "max_concurrent": 2,
    }
    started = time.monotonic()

    def launched() -> int:
        return len(topology.keys(SIDE_EFFECTS, f"launches/{tag}/"))

    a, b = topology.machines["a"], topology.machines["b"]
    runs = []
    with topology.api():
        for machine, other in ((a, b), (b, a)):  # three runs handed to each, then both run
            with only_on(machine, [other]):
                mine = [await run_deployment(DEPLOYMENT, parameters=parameters, timeout=0) for _ in range(3)]
                for run in mine:
                    await wait_for_state(run.id, lambda s: not s.is_scheduled(), timeout=60)
            runs += mine
        for run in runs:
            await wait_for_state(run.id, lambda s: s.is_running(), timeout=120)
        with anyio.fail_after(120):
            while launched() < 2:
                await anyio.sleep(0.5)
        await anyio.sleep(2)  # time for a third launch, were the limit not holding
        assert launched() == 2, "two slots, two turns launched before the gate opens"
        topology.s3().put_object(Bucket=SIDE_EFFECTS, Key=f"gates/{tag}", Body=b"")
        for run in runs:
            done = await wait_for_state(run.id, lambda s: s.is_final(), timeout=120)
            assert done.is_completed(), done

    s3 = topology.s3()
    turns = [
        json.loads(s3.get_object(Bucket=SIDE_EFFECTS, Key=key)["Body"].read())
        for key in topology.keys(SIDE_EFFECTS, f"turns/{tag}/")
    ]
    assert len(turns) == 6
    assert most_in_flight([(turn["launched"], turn["end"]) for turn in turns]) == 2, turns
    homes = {str(machine.home): name for name, machine in topology.machines.items()}
    assert {homes[turn["home"]] for turn in turns} == {"a", "b"}
    first = min(turn["launched"] for turn in turns)
    shown = sorted((homes[t["home"]], round(t["launched"] - first, 1), round(t["end"] - first, 1)) for t in turns)
    print(f"\nsix limited runs on two machines: {time.monotonic() - started:.1f}s; turns {shown}")


async def test_sessions_in_the_bucket_are_listed_forgotten_and_pruned(topology: Topology) -> None:
    """Last in the module: it prunes what the others left. The bucket is the result storage of
    every machine, so an operator anywhere sees, forgets and prunes the same sessions."""
    from datetime import timedelta

    from prefect.settings import PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK, temporary_settings

    from nexusflow.ops.sessions import forget_session, list_sessions, prune_sessions

    with topology.api(), temporary_settings({PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK: "s3-bucket/nexusflow-results"}):
        run = await run_deployment(DEPLOYMENT, parameters={"prompt": call("pruned", 1), "tools": [TOOLS]}, timeout=0)
        assert (await wait_for_state(run.id, lambda s: s.is_final())).is_completed()
        session = f"job-{run.id}"
        listed = {info.session_id: info for info in await list_sessions()}
        assert listed[session].state == "completed" and listed[session].turns >= 1
        forgotten = await forget_session(session)
        assert [one.session_id for one in forgotten] == [session] and forgotten[0].records > 3
        assert topology.keys(RESULTS, f"nexusflow/sessions/{session}/") == []
        left = {info.session_id for info in await list_sessions(state=["completed"])}
        pruned = await prune_sessions(older_than=timedelta(0))
        assert left <= {one.session_id for one in pruned}
        assert [info for info in await list_sessions() if info.state == "completed"] == []
