"""Sessions over their life: a run that waits for an answer looks waiting to Prefect, an
answer is for one call with its arguments and is used once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from uuid import UUID

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
from prefect.utilities.asyncutils import run_coro_as_sync

from nexusflow import Answer, ModelRequest, Toolkit, create_in_process_client, tool
from nexusflow._prefect.artifact_keys import artifact_key
from nexusflow._prefect.let_go import drain
from nexusflow._prefect.locks import STALE_AFTER, held
from nexusflow._prefect.session_lock import lock_name
from nexusflow._prefect.storage import holding
from nexusflow.errors import ResumeError, SessionLiveError
from nexusflow.ops.sessions import forget_session, session_info
from nexusflow.state.store import SessionStore
from nexusflow.testing import ScriptedModel

from approvals import ASKING_DEPLOY, Approval
from helpers.command import nexusflow_here, nexusflow_here_awaited
from paths import HELPERS

pytestmark = [pytest.mark.anyio]


def asks_then_says(request: ModelRequest) -> dict[str, object] | str:
    results = [message.content for message in request.messages if message.role == "tool"]
    if not results:
        return {"tool_calls": [{"name": "deploy", "arguments": {"service": "web"}}]}
    return f"done: {results[-1]}"


async def _of_type(flow_run_id: str, kind: StateType) -> bool:
    async with get_client() as client:
        found = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[UUID(flow_run_id)]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[kind])),
            )
        )
    return len(found) == 1


async def _state(flow_run_id: str) -> tuple[StateType | None, str | None]:
    async with get_client() as client:
        state = (await client.read_flow_run(UUID(flow_run_id))).state
    return (state.type, state.name) if state else (None, None)


async def test_a_waiting_run_is_paused_for_prefect_and_answered_once_it_goes_on(session_id, approval: Approval):
    """Prefect's state-type filter, which its dashboards and ``prefect flow-run ls`` use, does
    not count a run that waits for an answer as completed; once answered, it is."""
    client = create_in_process_client(asks_then_says)
    async with await Toolkit.load(tools=[approval.deploy]) as toolkit:
        waiting = await client.run("deploy web", toolkit, session_id=session_id)
        assert waiting.status == "pending" and waiting.flow_run_id and waiting.request
        assert not await _of_type(waiting.flow_run_id, StateType.COMPLETED)
        assert await _of_type(waiting.flow_run_id, StateType.PAUSED)
        assert await _state(waiting.flow_run_id) == (StateType.PAUSED, "AwaitingAnswer")

        done = await client.resume(session_id, Answer(id=waiting.request.id, ok=True), toolkit)
    assert done.status == "completed" and done.text == "done: deployed web", done.error
    assert approval.deployed == ["web"]
    assert await _state(waiting.flow_run_id) == (StateType.COMPLETED, "Answered")
    with pytest.raises(ResumeError, match="is not waiting for an answer"):
        await client.resume(session_id, Answer(id=waiting.request.id, ok=True))


async def test_an_approval_is_never_used_for_another_call_at_its_place(session_id, approval: Approval):
    """The stored request names the call it asks about, with its arguments; an answer given
    for other arguments (here the record says ``db``, the call is ``web``) is not this call's:
    the run asks again instead of running ``web`` on an approval for ``db``."""
    client = create_in_process_client(asks_then_says)
    async with await Toolkit.load(tools=[approval.deploy]) as toolkit:
        waiting = await client.run("deploy web", toolkit, session_id=session_id)
        assert waiting.request is not None
        store = SessionStore()
        state = await store.get(session_id)
        assert state is not None and state.pending is not None
        other = state.pending.model_copy(update={"arguments": '{"service": "db"}'})
        with holding(session_id):  # as a holder that stored another call's request would
            await store.save(session_id, state.model_copy(update={"pending": other}))

        again = await client.resume(session_id, Answer(id=waiting.request.id, ok=True), toolkit)
    assert again.status == "pending", again.text
    assert again.request is not None and again.request.arguments == waiting.request.arguments
    assert approval.deployed == []


async def test_a_python_run_that_waits_says_how_to_answer_it(session_id, approval: Approval, caplog):
    client = create_in_process_client(
        ScriptedModel([{"tool_calls": [{"name": "deploy", "arguments": {"service": "api"}}]}])
    )
    async with await Toolkit.load(tools=[approval.deploy]) as toolkit:
        waiting = await client.run("deploy api", toolkit, session_id=session_id)
    assert waiting.status == "pending"
    assert f"answer with: nexusflow answer {session_id} --approve|--deny" in caplog.text


SCRIPT = [{"tool_calls": [{"name": "deploy", "arguments": {"service": "api"}}]}, "all done"]


async def test_a_fresh_scripted_model_resumes_a_waiting_run(session_id, approval: Approval):
    """As a new process would: another client, another ``ScriptedModel`` of the same script.
    The first turn replays from storage, so the model is asked for turn 1 only, and plays
    reply 1 (it played reply 0 before, counting calls)."""
    async with await Toolkit.load(tools=[approval.deploy]) as toolkit:
        waiting = await create_in_process_client(ScriptedModel(SCRIPT)).run("go", toolkit, session_id=session_id)
        assert waiting.status == "pending" and waiting.request is not None
        fresh = ScriptedModel(SCRIPT)
        done = await create_in_process_client(fresh).resume(session_id, Answer(id=waiting.request.id, ok=True), toolkit)
    assert done.status == "completed" and done.text == "all done", done.error
    assert fresh.calls == 1 and approval.deployed == ["api"]


@pytest.mark.slow  # several runs through the server: the fast tier stays under 90 s
def test_ask_resume_and_map_have_sync_twins(session_id, approval: Approval):
    toolkit = Toolkit([approval.deploy])
    client = create_in_process_client(ScriptedModel(SCRIPT))
    waiting = client.run_sync("go", toolkit, session_id=session_id)
    assert waiting.request is not None
    done = client.resume_sync(session_id, Answer(id=waiting.request.id, ok=True), toolkit)
    assert done.text == "all done" and approval.deployed == ["api"]
    talker = create_in_process_client(ScriptedModel(["hello", "again"]))
    assert talker.ask_sync("hi", conversation_id=f"{session_id}-talk").text == "hello"
    assert talker.ask_sync("more", conversation_id=f"{session_id}-talk").text == "again"
    echo = create_in_process_client(lambda request: request.messages[-1].content.upper())
    assert [result.text for result in echo.map_sync(["a", "b"], session_id=f"{session_id}-batch")] == ["A", "B"]


PYTHON_RUN = """
import sys
from nexusflow import Toolkit, create_in_process_client
from nexusflow.testing import ScriptedModel
from asking import deploy

model = ScriptedModel([{"tool_calls": [{"name": "deploy", "arguments": {"service": "db"}}]}, "done"])
result = create_in_process_client(model).run_sync("go", Toolkit([deploy]), session_id=sys.argv[1])
print(result.status)
"""


def nexusflow(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexusflow", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=os.environ.copy(),
    )


def listed(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, dict[str, object]]:
    done = nexusflow_here(capsys, "sessions", "--json", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return {entry["session_id"]: entry for entry in json.loads(done.stdout)}


def state_of(session_id: str) -> str | None:
    """The session's state as ``nexusflow sessions`` shows it, read in this process: polling
    with the command costs a process start a poll."""
    info = run_coro_as_sync(session_info(session_id))
    return info.state if info is not None else None


@pytest.fixture
def asking(tmp_path: Path) -> Path:
    path = tmp_path / "asking.py"
    path.write_text(ASKING_DEPLOY)
    return path


@pytest.mark.slow
def test_sessions_lists_a_finished_a_waiting_and_a_crashed_run(asking, tmp_path, session_id, capsys):
    """The crashed run is a process killed; the command's runs and listings run here."""
    finished, waiting, crashed = (f"{session_id}-{name}" for name in ("finished", "waiting", "crashed"))
    assert nexusflow_here(capsys, "run", "hello", "--session", finished).returncode == 0
    asked = nexusflow_here(
        capsys, "run", 'call deploy {"service": "web"}', "--tools", f"{asking}:deploy", "--session", waiting
    )
    assert asked.returncode == 3, asked.stderr[-3000:]
    logs = tmp_path / "crashed"
    logs.mkdir()
    killed = subprocess.run(
        [sys.executable, str(HELPERS / "durable_run.py"), crashed, str(logs), "--kill-after", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    gone = time.monotonic()
    while (state := state_of(crashed)) == "running" and time.monotonic() - gone < 30:
        time.sleep(1)
    assert state == "crashed", "a holder that stopped beating is crashed within seconds"
    assert time.monotonic() - gone < 15

    sessions = listed(capsys)
    assert sessions[finished]["state"] == "completed" and sessions[finished]["turns"] == 1
    assert sessions[crashed]["turns"] == 1, "the turn it stored before its kill (its status said 0)"
    assert sessions[waiting]["state"] == "waiting" and sessions[waiting]["waits_for"] == "May I deploy web?"
    for entry in (sessions[finished], sessions[waiting], sessions[crashed]):
        assert {"session_id", "state", "flow_run_id", "updated", "turns"} <= entry.keys()
        assert datetime.fromisoformat(str(entry["updated"])).tzinfo is not None
        assert entry["flow_run_id"]
    assert set(listed(capsys, "--state", "waiting,crashed")) >= {waiting, crashed}
    assert finished not in listed(capsys, "--state", "waiting,crashed")
    assert finished not in listed(capsys, "--older-than", "1h")

    table = nexusflow_here(capsys, "sessions", "--state", "waiting")
    assert table.returncode == 0 and waiting in table.stdout and "May I deploy web?" in table.stdout
    refused = nexusflow_here(capsys, "sessions", "--state", "sleeping")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "nexusflow: sessions: 'sleeping' is not a state"
        " (the states: running, waiting, completed, failed, crashed, cancelled)"
    )


@pytest.mark.slow
def test_a_command_run_is_answered_by_its_flow_run_id(asking, session_id, capsys):
    asked = nexusflow_here(
        capsys, "run", 'call deploy {"service": "web"}', "--tools", f"{asking}:deploy", "--session", session_id
    )
    assert asked.returncode == 3, asked.stderr[-3000:]
    flow_run_id = re.search(r"/runs/flow-run/([0-9a-f-]{36})", asked.stderr).group(1)
    answered = nexusflow_here(capsys, "answer", flow_run_id, "--approve")
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert answered.stdout == "deploy: deployed web\n"
    again = nexusflow_here(capsys, "answer", flow_run_id, "--approve")
    assert again.returncode == 2
    assert again.stderr.strip() == f"nexusflow: flow run {flow_run_id} is not waiting for an answer: it is Answered"


@pytest.mark.slow
def test_a_python_run_is_never_answered_with_another_model(asking, tmp_path, session_id, capsys):
    (tmp_path / "program.py").write_text(PYTHON_RUN)
    ran = subprocess.run(
        [sys.executable, "program.py", session_id], capture_output=True, text=True, timeout=300, cwd=asking.parent
    )
    assert ran.stdout.strip().splitlines()[-1] == "pending", ran.stderr[-3000:]
    ways = (
        ("answer", session_id, "--approve"),
        ("run", "--session", session_id, "--answer", "approve", "--tools", f"{asking}:deploy"),
    )
    for way in ways:
        refused = nexusflow_here(capsys, *way)
        assert refused.returncode == 2, "the bundled scripted agent never takes the place of the program's model"
        assert refused.stderr.strip() == (
            f'nexusflow: session "{session_id}" was started from Python with its own model, which the command'
            f' cannot rebuild: resume it there with await client.resume("{session_id}",'
            f' Answer(id="{session_id}.0.0", ok=True), toolkit)'
        )


@pytest.mark.slow
async def test_a_jobs_waiting_run_is_answered_as_a_new_run_of_its_deployment(session_id, capsys):
    """A deployment's ``agent_job`` that ends pending (``wait: none``) is Paused; answering it
    by its flow run id starts the deployment again on the session, which goes on and ends."""
    from nexusflow.job import agent_job

    async with get_client() as client:
        deployment_id = await client.create_deployment(
            flow_id=await client.create_flow(agent_job),
            name=session_id,
            entrypoint="nexusflow.job:agent_job",
            parameters={
                "prompt": 'call current_temperature {"city": "Lisbon"}',
                "tools": ["nexusflow.demo:TOOLS"],
                "approval": ["current_temperature"],
                "wait": "none",
                "session_id": session_id,
            },
        )
        first = await client.create_flow_run_from_deployment(deployment_id)
    _execute(first.id)
    assert await _state(str(first.id)) == (StateType.PAUSED, "AwaitingAnswer")

    # In a thread: the command runs an event loop of its own.
    answered = await nexusflow_here_awaited(capsys, "answer", str(first.id), "--approve")
    assert answered.returncode == 0, answered.stderr[-3000:]
    second = re.search(r"it goes on in flow run ([0-9a-f-]{36}) of its deployment", answered.stderr).group(1)
    _execute(UUID(second))
    assert await _state(second) == (StateType.COMPLETED, "Completed")
    assert await _state(str(first.id)) == (StateType.COMPLETED, "Answered")


def _execute(flow_run_id: UUID) -> None:
    """The flow run, as a process worker runs it."""
    engine = [sys.executable, "-m", "prefect.flow_engine", "nexusflow.job:agent_job"]
    done = subprocess.run(
        engine,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PREFECT__FLOW_RUN_ID": str(flow_run_id)},
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_forget_refuses_a_running_session_then_removes_every_record(tmp_path, session_id, storage, capsys):
    released = tmp_path / "released"
    logs = tmp_path / "logs"
    logs.mkdir()
    holder = subprocess.Popen(
        [sys.executable, str(HELPERS / "durable_run.py"), session_id, str(logs), "--hold-until", str(released)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (logs / "holding").exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        refused = nexusflow_here(capsys, "forget", session_id)
        assert refused.returncode == 1
        assert f'session: "{session_id}" is running (flow run ' in refused.stderr
        assert (storage / "nexusflow" / "sessions" / session_id / "status.json").exists(), "nothing was deleted"
    finally:
        released.touch()
        holder.communicate(timeout=120)
    assert holder.returncode == 0
    forgot = nexusflow_here(capsys, "forget", session_id)
    assert forgot.returncode == 0, forgot.stderr[-3000:]
    assert forgot.stdout.startswith(f"forgot {session_id}: ")
    assert not (storage / "nexusflow" / "sessions" / session_id).exists()
    assert session_id not in listed(capsys)
    nothing = nexusflow_here(capsys, "forget", session_id)
    assert nothing.returncode == 0 and f"nothing of session {session_id} was found" in nothing.stderr


@pytest.mark.slow
def test_prune_removes_the_idle_sessions_of_the_states_it_is_given(asking, session_id, tmp_path, capsys):
    # A storage of its own: in the shared one, prune forgot every session the earlier tests of
    # its worker had left (55 s of CI spent deleting them, and their records gone under them).
    with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: tmp_path / "storage"}):
        finished, waiting = f"{session_id}-done", f"{session_id}-asks"
        assert nexusflow_here(capsys, "run", "hello", "--session", finished).returncode == 0
        asked = nexusflow_here(
            capsys, "run", 'call deploy {"service": "web"}', "--tools", f"{asking}:deploy", "--session", waiting
        )
        assert asked.returncode == 3
        kept = nexusflow_here(capsys, "prune", "--older-than", "1h")
        assert kept.returncode == 0 and finished not in kept.stdout
        pruned = nexusflow_here(capsys, "prune", "--older-than", "0s")
        assert pruned.returncode == 0, pruned.stderr[-3000:]
        assert f"forgot {finished}: " in pruned.stdout and waiting not in pruned.stdout, "a waiting session stays"
        assert set(listed(capsys)) >= {waiting} and finished not in listed(capsys)
        named = nexusflow_here(capsys, "prune", "--older-than", "0s", "--state", "waiting")
        assert f"forgot {waiting}: " in named.stdout
        bad = nexusflow_here(capsys, "prune", "--older-than", "a week")
        assert bad.returncode == 2
        assert "is not a duration" in bad.stderr


async def _artifact_keys(*session_ids: str) -> list[str]:
    keys = [artifact_key(kind, name) for name in session_ids for kind in ("transcript", "summary")]
    async with get_client() as client:
        found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    return sorted(str(artifact.key) for artifact in found)


@pytest.mark.slow  # five runs, a fan-out and a forget: 5-16 s
async def test_forget_deletes_the_session_s_artifacts_and_not_another_s_of_the_same_key(session_id):
    """A finished session's transcript and summary (of each of its runs, its nested
    sessions' too; and a progress bar, for a run longer than a second) go with it; a
    session whose id folds to the same characters keeps its own, under a key of its own."""
    client = create_in_process_client(lambda request: "hi")
    ours, twin = f"{session_id}.x", f"{session_id}-x"
    assert artifact_key("transcript", ours) != artifact_key("transcript", twin)
    for name in (ours, ours, twin):
        assert (await client.run("hello", session_id=name)).status == "completed"
    members = await client.map(["a", "b"], session_id=ours)
    nested = [str(result.session_id) for result in members]
    assert len(await _artifact_keys(ours, *nested)) == 2 * 2 + 2 * 2, "two runs of ours, two members"
    assert len(await _artifact_keys(twin)) == 2, "the twin's one run, under its own keys"

    forgotten = await forget_session(ours)

    by_name = {one.session_id: one.artifacts for one in forgotten}
    assert by_name[ours] >= 4 and all(by_name[name] >= 2 for name in nested), by_name
    assert await _artifact_keys(*nested) == []
    assert await _artifact_keys(ours) == []
    assert await _artifact_keys(twin) == sorted(artifact_key(kind, twin) for kind in ("transcript", "summary"))


@pytest.mark.slow  # a run, and the command in a process of its own
async def test_a_forget_whose_artifact_deletes_meet_503s_tries_them_again(session_id, monkeypatch, capsys):
    """SQLite's busy server answers 503; once Prefect's own retries are spent (none here) the
    delete is tried again, and the forget ends with every artifact gone. A prune of 300
    sessions on a loaded machine failed with a traceback at one such delete."""
    from helpers.flaky_api import flaky_api

    client = create_in_process_client(lambda request: "hi")
    assert (await client.run("hello", session_id=session_id)).status == "completed"
    assert len(await _artifact_keys(session_id)) == 2
    with (
        flaky_api(os.environ["PREFECT_API_URL"], failures=2, route="DELETE /api/artifacts/[^/]+") as (url, refused),
        monkeypatch.context() as patched,
    ):
        patched.setenv("PREFECT_API_URL", url)
        patched.setenv("PREFECT_CLIENT_MAX_RETRIES", "0")  # our retries, not the client's, are under test
        forgot = nexusflow("forget", session_id)
    assert len(refused) == 2
    assert forgot.returncode == 0, forgot.stderr[-3000:]
    assert "2 artifacts" in forgot.stdout, forgot.stdout
    assert await _artifact_keys(session_id) == []

    # Refused past every retry: one line, and the session stays whole for the next forget.
    again = f"{session_id}-again"
    assert (await client.run("hello", session_id=again)).status == "completed"
    with (
        flaky_api(os.environ["PREFECT_API_URL"], failures=100, route="DELETE /api/artifacts/[^/]+") as (url, refused),
        monkeypatch.context() as patched,
    ):
        patched.setenv("PREFECT_API_URL", url)
        patched.setenv("PREFECT_CLIENT_MAX_RETRIES", "0")
        failed = nexusflow("forget", again)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr[-3000:]
    said = "nexusflow: error: prefect: PrefectHTTPStatusError: Server error '503"
    assert failed.stderr.startswith(said), failed.stderr
    assert await session_info(again) is not None
    forgot_again = await nexusflow_here_awaited(capsys, "forget", again)
    assert forgot_again.stdout.startswith(f"forgot {again}: ")
    assert await session_info(again) is None and await _artifact_keys(again) == []


@pytest.mark.slow
async def test_thirty_finished_sessions_leave_no_session_lock(session_id, caplog):
    """Twenty at once in one process, then the last ten, each with a tool call: locks are
    taken and let go side by side, and no run reads another's result (a hundred cost a
    minute of CI and found nothing thirty do not; the soak of many runs is benchmarks').
    Only these runs' locks count: a run killed by an earlier test leaves its lock for its
    resume. A let-go the server refused for the whole of its tries (a busy SQLite server's
    503s, 20 s of them in CI33) leaves the lock, says so, and the lock, no longer beating, is
    a crashed holder's, which ``forget_session`` removes."""

    @tool
    def double(n: int) -> int:
        """Double a number."""
        return n * 2

    def model(request: ModelRequest) -> dict[str, object] | str:
        n = int(next(m.content for m in request.messages if m.role == "user").split()[-1])
        if request.messages[-1].role == "user":
            return {"tool_calls": [{"name": "double", "arguments": {"n": n}}]}
        return f"run {n} -> {request.messages[-1].content}"

    client = create_in_process_client(model)
    async with await Toolkit.load(tools=[double]) as toolkit:
        results = await client.map([f"run {n}" for n in range(30)], toolkit, max_concurrency=20, session_id=session_id)
    assert [result.status for result in results] == ["completed"] * 30, [result.error for result in results]
    assert [result.text for result in results] == [f"run {n} -> {n * 2}" for n in range(30)]
    ours = {lock_name(result.session_id) for result in results if result.session_id}
    assert len(ours) == 30
    assert await anyio.to_thread.run_sync(drain) == [], "every let-go done within its bound"
    limits = []
    async with get_client() as prefect:
        while page := await prefect.read_global_concurrency_limits(limit=200, offset=len(limits)):
            limits += page
    left = {limit.name for limit in limits if limit.name in ours}
    refused = {
        result.session_id
        for result in results
        if f'session "{result.session_id}": could not let go of its lock' in caplog.text
    }
    assert left <= {lock_name(name) for name in refused if name}, "a lock left without a word"
    for name in refused:
        assert name is not None
        await _forgotten_once_stale(name)
        async with get_client() as prefect:
            assert await held(prefect, lock_name(name)) is None


async def _forgotten_once_stale(session_id: str) -> None:
    """``forget_session`` once the session's holder, which stopped beating, is no longer
    taken for a live one (``STALE_AFTER`` seconds after its last beat)."""
    deadline = time.monotonic() + 4 * STALE_AFTER
    while True:
        try:
            await forget_session(session_id)
            return
        except SessionLiveError:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(1)


SLOW_TOOL = '''
import time
from nexusflow import tool

@tool
def wait(seconds: float) -> str:
    """Wait."""
    time.sleep(seconds)
    return "waited"
'''


@pytest.mark.slow
def test_ctrl_c_says_how_to_go_on_and_the_session_goes_on_without_its_prompt(tmp_path, session_id, capsys):
    tools = tmp_path / "slow_tools.py"
    tools.write_text(SLOW_TOOL)
    argv = ["run", 'call wait {"seconds": 600}', "--tools", f"{tools}:wait", "--session", session_id]
    run = subprocess.Popen(
        [sys.executable, "-m", "nexusflow", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},  # as installed
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and state_of(session_id) != "running":
        time.sleep(0.5)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err[-3000:]
    assert f"nexusflow: interrupted; go on with: nexusflow run --session {session_id}" in err
    assert "Traceback" not in err

    tools.write_text(SLOW_TOOL.replace("time.sleep(seconds)", "pass"))
    again = nexusflow_here(capsys, "run", "--session", session_id)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == "wait: waited\n"
    other = nexusflow_here(capsys, "run", "something else", "--session", session_id)
    assert other.returncode == 0, other.stderr[-3000:]
    assert f"nexusflow: session {session_id} ran another prompt before: this run starts it anew" in other.stderr
