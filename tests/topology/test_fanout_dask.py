"""Fan-out on a Dask cluster of worker processes (prefect-dask's ``DaskTaskRunner`` over a
real ``distributed.LocalCluster``): ``client.map`` and a user's own ``task.map`` of agent
runs, each member a durable run with its own session in a worker process; a member killed
with its worker resumes on rerun while its finished siblings replay.

One cluster serves the module. Its scheduler retries no task whose worker died
(``allowed-failures`` 0), so a killed member fails in its batch and resumes in the rerun;
with Dask's default (3) it resumes at once on a restarted worker, in the same batch. A member
whose worker freezes is never reported by Dask: its batch gives up on it once its session's
beat stood still for ``GIVE_UP_AFTER`` seconds; on one that never starts, ``START_WITHIN``
seconds after the batch last moved (a stopped worker shows both).

Dask is imported by the fixtures only: the fast tier collects this module without it."""

from __future__ import annotations

import multiprocessing.resource_tracker
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import psutil
import pytest
from prefect import flow, task
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

from nexusflow import ModelRequest, NexusflowError, Toolkit, create_in_process_client, tool
from nexusflow._prefect.fanout import START_WITHIN
from nexusflow._prefect.locks import held
from nexusflow._prefect.session_lock import GIVE_UP_AFTER, lock_name

from paths import HELPERS

pytestmark = [
    pytest.mark.anyio,
    # one worker runs the module, so its cluster starts once; not "heavy": it stops and kills only
    # its own workers, and waits through most of its time (a frozen member's bounds)
    pytest.mark.xdist_group("dask"),
    pytest.mark.usefixtures("prefect_server"),
]

STACKS = HELPERS / "dask_stacks.py"

# The workers cannot import this module (tests/ is on no path of theirs): its functions go by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster(prefect_server: str, stacks: Path) -> Iterator[str]:
    """Two worker processes of one thread each; yields the scheduler's address, which is
    how a flow's ``DaskTaskRunner`` finds it (one made with ``cluster=`` starts a new cluster
    for each flow run: Prefect duplicates the runner per run, without the cluster). After
    the module, no worker process is left."""
    import dask
    import distributed

    multiprocessing.resource_tracker.ensure_running()  # Python's, for the process's life: not the cluster's
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    config = {
        "distributed.scheduler.allowed-failures": 0,
        "distributed.scheduler.worker-saturation": 1.0,  # a worker holds only the member it runs
        # a killed worker's nanny starts another; a LocalCluster closes that nanny for good when
        # the new worker has not joined within this (15 s by default): on this loaded machine a
        # restart took 20 s, the cluster lost a worker, and the member sent to it was KilledWorker
        "distributed.deploy.lost-worker-timeout": "300s",
        # a worker (a restarted one too) imports nexusflow as it starts: else the first member
        # sent to it imports nexusflow on the worker's event loop as it is unpickled, which held
        # that loop (no heartbeat, no member started) for some 50 s on this loaded machine
        "distributed.worker.preload": ["nexusflow.compose", str(STACKS)],
    }
    os.environ["NEXUSFLOW_TEST_DASK_STACKS"] = str(stacks)  # the workers' environment, as they start
    with (
        dask.config.set(config),
        distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0") as local,
    ):
        yield local.scheduler_address
    left = [
        child
        for child in psutil.Process().children(recursive=True)
        if child.pid not in before and child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    ]
    assert not left, f"dask processes left behind: {[child.cmdline() for child in left]}"


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where each worker writes its threads' stacks (``helpers/dask_stacks.py``)."""
    return tmp_path_factory.mktemp("dask-stacks")


def worker_stacks(folder: Path) -> str:
    """Each worker's stacks, asked of the workers alive now (``helpers/dask_stacks.py``): what
    a failed batch's message ends with, so that a member lost to a frozen worker says where
    that worker stood. Only this process's own children are signalled (a pid is reused)."""
    ours = {child.pid for child in psutil.Process().children(recursive=True)}
    for path in folder.glob("worker-*.txt"):
        pid = int(path.stem.removeprefix("worker-"))
        if pid in ours:
            os.kill(pid, signal.SIGUSR1)
    time.sleep(1)  # the handler writes at once, from the worker's signal handler
    return (
        "\n".join(f"== {path.name}\n{path.read_text()[-8000:]}" for path in sorted(folder.glob("worker-*.txt")))
        or "(no worker wrote its stacks)"
    )


def both_workers(address: str) -> None:
    """Wait until the cluster has both its workers: a killed one is restarted by its nanny,
    which took 11-20 s on this loaded machine."""
    import distributed

    with distributed.Client(address) as client:
        client.wait_for_workers(2, timeout=240)


@pytest.fixture
def runner(cluster: str) -> Any:
    """A ``DaskTaskRunner`` on the module's cluster, once both its workers are up: a worker
    killed by an earlier test is back, so each test starts from the same two."""
    from prefect_dask import DaskTaskRunner

    both_workers(cluster)
    return DaskTaskRunner(address=cluster)


@pytest.fixture
def unbounded_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test whose subject is not the start bound (the frozen workers' test is): under the
    slow tier's load (two cores, every other slow test beside this module) a batch once saw
    nothing move for ``START_WITHIN`` seconds while its members' task and flow runs were being
    created on a busy server, and gave up on a member that then ran (CI30)."""
    import nexusflow._prefect.fanout

    monkeypatch.setattr(nexusflow._prefect.fanout, "START_WITHIN", 600.0)


def worker_pids(address: str) -> set[int]:
    import distributed

    with distributed.Client(address) as client:
        return set(client.run(os.getpid).values())


def recording_model(calls: Path):
    """A model that answers ``done <prompt>``, appending ``<prompt> <turn> <pid>`` to
    ``calls`` (model calls are counted across processes in a file). With a ``work`` tool in
    the toolkit, turn 0 calls it first."""

    def model(request: ModelRequest) -> object:
        prompt = next(message.content for message in request.messages if message.role == "user")
        turn = sum(message.role == "assistant" for message in request.messages)
        with calls.open("a") as file:
            file.write(f"{prompt} {turn} {os.getpid()}\n")
        if turn == 0 and request.tools:
            return {"tool_calls": [{"name": "work", "arguments": {"topic": prompt}}]}
        return f"done {prompt}"

    return model


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def asked(path: Path) -> list[str]:
    """The model calls recorded in ``path``, as ``<prompt> <turn>``, sorted."""
    return sorted(line.rsplit(" ", 1)[0] for line in lines(path))


async def agent_runs(name_part: str) -> list:
    """The flow runs whose name holds ``name_part``."""
    async with get_client() as client:
        return await client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=name_part)))


@pytest.mark.timeout(600, func_only=True)  # a worker took minutes to take its first member under load (CI48)
@pytest.mark.usefixtures("unbounded_start")
async def test_members_run_on_worker_processes_in_task_runs_of_their_own(runner, cluster, session_id, tmp_path, stacks):
    """Four members on two one-thread workers: two run at once, two wait for a free worker."""
    calls = tmp_path / "calls"
    client = create_in_process_client(recording_model(calls))

    @flow(task_runner=runner)
    async def batch(prompts: list[str]):
        return await client.map(prompts, max_concurrency=4, session_id=session_id)

    prompts = [f"topic {n}" for n in range(4)]
    results = await batch(prompts)
    assert [r.status for r in results] == ["completed"] * 4, ([r.error for r in results], worker_stacks(stacks))
    assert [r.text for r in results] == [f"done {p}" for p in prompts], "results come in prompt order"
    assert [r.session_id for r in results] == [f"{session_id}.{n}" for n in range(4)]
    ran_in = {int(line.split()[-1]) for line in lines(calls)}
    assert len(lines(calls)) == 4
    assert ran_in <= worker_pids(cluster) and os.getpid() not in ran_in, "every member ran in a worker process"

    runs = await agent_runs(f"agent-{session_id}.")
    assert sorted(run.name for run in runs) == sorted(f"agent-{session_id}.{n}" for n in range(4))
    assert all(run.state is not None and run.state.is_completed() for run in runs)
    parents = {run.parent_task_run_id for run in runs}
    assert None not in parents and len(parents) == 4, "each member's flow run is nested in a task run of its own"
    async with get_client() as prefect:
        left = [n for n in range(4) if await held(prefect, lock_name(f"{session_id}.{n}")) is not None]
    assert left == [], "each member's lock deleted before its task ended: a worker runs no exit hooks"


@pytest.mark.timeout(600, func_only=True)  # a worker took minutes to take its first member under load (CI48)
@pytest.mark.usefixtures("unbounded_start")
async def test_a_users_own_task_map_of_agent_runs(runner, cluster, session_id, tmp_path, stacks):
    calls = tmp_path / "calls"
    client = create_in_process_client(recording_model(calls))

    @task
    def summarize(topic: str) -> str:
        result = client.run_sync(topic, session_id=f"{session_id}-{topic}")
        return result.text or f"failed: {result.error}"

    @flow(task_runner=runner)
    def digest(topics: list[str]) -> list[str]:
        return summarize.map(topics).result()

    topics = ["prefect", "dask"]
    assert digest(topics) == [f"done {topic}" for topic in topics], worker_stacks(stacks)
    ran_in = {int(line.split()[-1]) for line in lines(calls)}
    assert ran_in <= worker_pids(cluster) and os.getpid() not in ran_in
    for topic in topics:
        (run,) = await agent_runs(f"agent-{session_id}-{topic}")
        assert run.state is not None and run.state.is_completed()


def killing_work(marker: Path) -> Toolkit:
    """A ``work`` tool whose first call for ``topic 1`` kills the process it runs in (its
    Dask worker), leaving ``marker`` behind so that a rerun's call goes on."""

    @tool
    def work(topic: str) -> str:
        """Work on a topic."""
        if topic == "topic 1" and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return f"worked on {topic}"

    return Toolkit([work])


# the cluster and server start outside it; a worker's restart (its nanny's, with nexusflow's import)
# took minutes beside the slow tier's other tests (CI47: the first test timed out at 300 s)
@pytest.mark.timeout(600, func_only=True)
@pytest.mark.usefixtures("unbounded_start")
async def test_a_member_killed_with_its_worker_resumes_on_rerun(runner, cluster, session_id, tmp_path, stacks):
    calls = tmp_path / "calls"
    client = create_in_process_client(recording_model(calls))
    tools = killing_work(tmp_path / "killed")
    prompts = ["topic 0", "topic 1"]

    @flow(task_runner=runner)
    async def batch():
        # one member per worker: a member queued behind the killed one on its worker would die with it
        return await client.map(prompts, tools, max_concurrency=2, session_id=session_id)

    first = await batch()
    assert (tmp_path / "killed").exists(), ([r.error for r in first], worker_stacks(stacks))
    assert [r.status for r in first] == ["completed", "failed"], [r.error for r in first]
    assert first[1].error is not None and first[1].error.startswith("KilledWorker: "), first[1].error
    assert asked(calls) == ["topic 0 0", "topic 0 1", "topic 1 0"], (
        "the killed member's model was asked once, before its tool killed it"
    )

    calls.unlink()
    both_workers(cluster)
    again = await batch()
    assert [r.text for r in again] == ["done topic 0", "done topic 1"], (
        [r.error for r in again],
        worker_stacks(stacks),
    )
    assert asked(calls) == ["topic 1 1"], (
        "the finished member replayed without a model call, the killed one from its stored turn"
    )
    assert [r.metrics.replayed_turns for r in again] == [2, 1]
    assert again[1].metrics.replayed_tool_calls == 0, "the killed tool call runs again"


LOST = (
    r'map: member "{member}" stopped beating (\d+)s ago while it held its session, and its task runner reported'
    r" nothing: the process that ran it died or froze \(a Dask worker killed or stopped\); run the batch again to"
    r" resume it from its stored steps"
)
NEVER_STARTED = (
    r'map: member "{member}" has not started (\d+)s after it was sent to its task runner, while nothing else in'
    r" its batch moved: the process it was sent to is frozen or gone \(a Dask worker stopped, or a cluster with no"
    r" worker left\); run the batch again to resume it from its stored steps"
)


def freezing_work(marker: Path) -> Toolkit:
    """A ``work`` tool whose first call stops the process it runs in (SIGSTOP: its Dask
    worker freezes, and Dask notices nothing), its process id left in ``marker``."""

    @tool
    def work(topic: str) -> str:
        """Work on a topic."""
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)
        return f"worked on {topic}"

    return Toolkit([work])


# the cluster and server start outside it; a worker's restart (its nanny's, with nexusflow's import)
# took minutes beside the slow tier's other tests (CI47: the first test timed out at 300 s)
@pytest.mark.timeout(600, func_only=True)
async def test_members_on_frozen_workers_fail_within_their_bounds_and_resume_on_rerun(
    runner, cluster, session_id, tmp_path, request, stacks
):
    """One worker is stopped before the batch, the other by the member it runs, at its tool
    call: Dask reports neither (a stopped worker is dropped after its ``worker-ttl``, 5
    minutes). The member that beat is given up on ``GIVE_UP_AFTER`` seconds after its last
    beat, the one that never started ``START_WITHIN`` seconds after that (the batch's last
    move); both bounds run at once, so the test waits for the longer only."""
    calls = tmp_path / "calls"
    frozen = tmp_path / "frozen"
    client = create_in_process_client(recording_model(calls))
    tools = freezing_work(frozen)
    prompts = ["topic 0", "topic 1"]

    @flow(task_runner=runner)
    async def batch():
        return await client.map(prompts, tools, max_concurrency=2, session_id=session_id)

    stopped = min(worker_pids(cluster))
    os.kill(stopped, signal.SIGSTOP)
    try:
        first = await batch()
        assert psutil.Process(int(frozen.read_text())).status() == psutil.STATUS_STOPPED, "the member froze its worker"
        asked_first = asked(calls)
    finally:
        # both frozen workers are killed, as an operator would (their nannies start others): a
        # stopped worker let go on runs the member the batch gave up on, late, beside the rerun
        os.kill(stopped, signal.SIGKILL)
        if frozen.exists():
            os.kill(int(frozen.read_text()), signal.SIGKILL)
    assert [r.status for r in first] == ["failed", "failed"], [r.error for r in first]
    (ran,) = [n for n in range(2) if asked_first == [f"topic {n} 0"]]
    lost = re.fullmatch(LOST.format(member=re.escape(f"{session_id}.{ran}")), first[ran].error or "")
    assert lost is not None, first[ran].error
    assert int(lost[1]) >= GIVE_UP_AFTER, "the batch gave the member the time a retry needs to take it over"
    never = re.fullmatch(NEVER_STARTED.format(member=re.escape(f"{session_id}.{1 - ran}")), first[1 - ran].error or "")
    assert never is not None, first[1 - ran].error
    assert START_WITHIN <= int(never[1]) < START_WITHIN + 30, "given up on once the bound passed"

    both_workers(cluster)
    request.getfixturevalue("unbounded_start")  # the rerun's subject is the resume, not the bound
    again = await batch()
    assert [r.text for r in again] == ["done topic 0", "done topic 1"], (
        [r.error for r in again],
        worker_stacks(stacks),
    )
    assert again[ran].metrics.replayed_turns == 1, "the frozen member resumed from its stored turn"


async def test_a_client_that_cannot_cross_to_a_worker_is_refused_by_name(runner, session_id):
    import threading

    lock = threading.Lock()

    def model(request: ModelRequest) -> str:
        with lock:
            return "never"

    client = create_in_process_client(model)

    @flow(task_runner=runner)
    async def batch():
        return await client.map(["x"], session_id=session_id)

    with pytest.raises(NexusflowError) as refused:
        await batch()
    assert str(refused.value) == (
        "map: the client cannot go to another process, where the flow's DaskTaskRunner runs each member "
        "(TypeError: cannot pickle '_thread.lock' object); make it picklable (no lock, open file or "
        "connection in it) or run the flow with ThreadPoolTaskRunner"
    )
    assert await agent_runs(f"agent-{session_id}") == [], "nothing ran"


def test_a_scripted_model_crosses_to_a_worker_as_a_copy():
    """A client of ``ScriptedModel`` can be a map's (its lock is made anew on the other side);
    the copy records its own requests."""
    from nexusflow.testing import ScriptedModel

    scripted = ScriptedModel(["first", "second"])
    copy = cloudpickle.loads(cloudpickle.dumps(create_in_process_client(scripted)))
    result = copy.run_sync("hello")
    assert result.text == "first"
    assert scripted.calls == 0, "the original recorded nothing: the copy ran"
