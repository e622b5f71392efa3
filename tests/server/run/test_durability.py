"""The durability guarantees under faults: one live run per session, a transcript of any
size, keys that chain, storage that fails loudly, infrastructure errors reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from nexusflow import ModelRequest, RunResult, Toolkit, create_in_process_client, tool
from nexusflow.client import exchange_session_id

from paths import HELPERS

pytestmark = [pytest.mark.anyio]


def child(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HELPERS / "durable_run.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def finish(process: subprocess.Popen[str], timeout: float = 300) -> tuple[int, RunResult | None, str]:
    out, err = process.communicate(timeout=timeout)
    lines = out.strip().splitlines()
    result = RunResult.model_validate_json(lines[-1]) if lines and lines[-1].startswith("{") else None
    return process.returncode, result, err


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


# 1. One live run per session: tests/homes/test_server_places.py and tests/server/state/test_session_lock.py.


# Kill at every step, in every place the server lives: tests/homes/test_server_places.py.


# 2. Prompt and history of any size.


def echo_model(request: ModelRequest) -> str:
    last = request.messages[-1]
    return f"read {len(last.content or '')} characters"


async def test_a_one_megabyte_prompt_runs(session_id):
    prompt = "x" * 1_000_000
    result = await create_in_process_client(echo_model).run(prompt, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "read 1000000 characters"


async def test_a_conversation_holding_a_600_kb_tool_result_goes_on(session_id):
    @tool
    def page() -> str:
        """A large page."""
        return "p" * 600_000

    def model(request: ModelRequest):
        last = request.messages[-1]
        if last.role == "user" and last.content == "fetch":
            return {"tool_calls": [{"name": "page", "arguments": {}}]}
        if last.role == "tool":
            return f"fetched {len(last.content or '')}"
        return f"history of {sum(len(m.content or '') for m in request.messages)} characters"

    client = create_in_process_client(model)
    async with await Toolkit.load(tools=[page]) as toolkit:
        first = await client.ask("fetch", toolkit, conversation_id=session_id)
        second = await client.ask("and now?", toolkit, conversation_id=session_id)
    assert first.status == "completed" and first.text == "fetched 600000"
    assert second.status == "completed", second.error
    assert second.text is not None and int(second.text.split()[2]) > 600_000


async def test_an_error_never_carries_the_whole_prompt(session_id):
    def broken(request: ModelRequest):
        raise RuntimeError("model down")

    result = await create_in_process_client(broken).run("y" * 700_000, session_id=session_id)
    assert result.status == "failed"
    assert result.error is not None and len(result.error) < 2000


# 9. A changed conversation re-executes everything after the change.


@pytest.mark.slow
async def test_another_prompt_in_the_same_session_reruns_its_tools(session_id):
    calls: list[str] = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        calls.append(key)
        return f"value {len(calls)}"

    def model(request: ModelRequest):
        if request.messages[-1].role == "user":
            return {"tool_calls": [{"id": "same", "name": "lookup", "arguments": {"key": "k"}}]}
        return f"{request.messages[0].content}: {request.messages[-1].content}"

    client = create_in_process_client(model)
    async with await Toolkit.load(tools=[lookup]) as toolkit:
        first = await client.run("first", toolkit, session_id=session_id)
        second = await client.run("second", toolkit, session_id=session_id)
        again = await client.run("second", toolkit, session_id=session_id)
    assert first.text == "first: value 1"
    assert second.text == "second: value 2", "the tool ran again: its call follows another turn"
    assert again.text == "second: value 2" and calls == ["k", "k"], "an unchanged rerun replays"


# 13. Every accepted conversation id works.


async def test_a_128_character_conversation_id_works(session_id):
    conversation = (session_id + "c" * 128)[:128]
    client = create_in_process_client(lambda request: f"exchange {len(request.messages)}")
    first = await client.ask("one", conversation_id=conversation)
    second = await client.ask("two", conversation_id=conversation)
    assert first.status == second.status == "completed", (first.error, second.error)
    assert len(first.session_id) <= 128 and first.session_id != second.session_id
    assert exchange_session_id("c" * 128, 3) != exchange_session_id("c" * 127 + "d", 3)


# 10. Storage that fails, storage that tears.


@pytest.fixture
def full_disk(tmp_path: Path):
    """A real 256 KiB tmpfs, filled up once the run has started (root, as in CI)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here: {done.stderr.decode()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> None:
    with open(disk / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before the run", "during the run"])
def test_a_full_disk_fails_the_run_with_a_storage_error(tmp_path, session_id, full_disk, when):
    (tmp_path / "log").mkdir()
    if when == "before the run":
        _fill(full_disk)
    process = child(
        session_id,
        str(tmp_path / "log"),
        "--hold",
        "3",
        env={"PREFECT_LOCAL_STORAGE_PATH": str(full_disk)},
    )
    if when == "during the run":
        deadline = time.monotonic() + 60
        while not (tmp_path / "log" / "model_turns").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        _fill(full_disk)  # the disk fills while the first tool runs
    code, result, err = finish(process)
    assert code == 0, err[-3000:]
    assert result is not None and result.status == "failed", result
    assert result.error is not None and result.error.startswith("storage: "), result.error
    assert "No space left on device" in result.error
    assert not list(full_disk.rglob("*.part")), "no temporary file is left behind"


@pytest.mark.slow
def test_a_torn_record_is_reported_and_its_step_runs_again(tmp_path, session_id, storage):
    code, result, err = finish(child(session_id, str(tmp_path)))
    assert code == 0 and result is not None and result.status == "completed", err[-2000:]
    records = sorted(storage.glob(f"nexusflow/sessions/{session_id}/steps/2/turn/*"))
    assert len(records) == 1
    records[0].write_bytes(records[0].read_bytes()[:40])  # what an in-place writer leaves on a crash
    code, result, err = finish(child(session_id, str(tmp_path)))
    assert code == 0 and result is not None and result.status == "completed", err[-2000:]
    assert "is unreadable" in err and records[0].name in err
    assert lines(tmp_path / "model_turns") == ["0", "1", "2", "2"], "only the torn step ran again"
    assert json.loads(records[0].read_bytes()), "and its record is whole again"


# 11. Infrastructure errors are reported, not raised.


@pytest.mark.slow
async def test_a_prefect_api_that_stays_down_is_a_failed_result(session_id, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    monkeypatch.setenv("PREFECT_CLIENT_MAX_RETRIES", "0")
    started = time.monotonic()
    result, err = await _run_in_child_env(session_id)
    assert result.status == "failed"
    assert result.error_type == "PrefectApiError", result.error
    assert result.error is not None and result.error.startswith("prefect: "), result.error
    assert time.monotonic() - started < 120
    again = [line.split(" - ", 1)[-1] for line in err.splitlines() if "it starts again" in line]
    said = f"session {session_id}: the Prefect API failed the run ({result.error}); it starts again"
    assert again == [f"{said} from its finished steps (start {n} of 4)" for n in (2, 3, 4)], err[-3000:]


@pytest.mark.slow
async def test_a_flow_run_refused_with_503_is_retried_and_completes(session_id, monkeypatch):
    from helpers.flaky_api import flaky_api

    with flaky_api(os.environ["PREFECT_API_URL"], failures=3) as (url, refused):
        monkeypatch.setenv("PREFECT_API_URL", url)
        monkeypatch.setenv("PREFECT_CLIENT_MAX_RETRIES", "0")  # our retries, not the client's, are under test
        result, _ = await _run_in_child_env(session_id)
    assert len(refused) == 3
    assert result.status == "completed", result.error
    assert result.text == "hi"


async def _run_in_child_env(session_id: str) -> tuple[RunResult, str]:
    """The run in a process of its own, and what it said on stderr."""
    script = (
        "import anyio, sys\n"
        "from nexusflow import create_in_process_client\n"
        "r = anyio.run(lambda: create_in_process_client(lambda q: 'hi').run('x', session_id=sys.argv[1]))\n"
        "print(r.model_dump_json())\n"
    )
    done = await anyio.run_process([sys.executable, "-c", script, session_id], check=False, env=dict(os.environ))
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = RunResult.model_validate_json(done.stdout.decode().strip().splitlines()[-1])
    return result, done.stderr.decode()


# Concurrency: none raises, results never cross.


def _outcomes(done: subprocess.CompletedProcess[str], count: int) -> dict[int, dict[str, str]]:
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split(" ", 1) for line in done.stdout.strip().splitlines() if line[:1].isdigit()]
    outcomes = {int(index): json.loads(row) for index, row in rows}
    assert sorted(outcomes) == list(range(count))
    return outcomes


def _check(outcomes: dict[int, dict[str, str]]) -> int:
    for index, outcome in outcomes.items():
        assert outcome["status"] in ("completed", "failed"), outcome
        if outcome["status"] == "completed":
            assert outcome["text"] == f"run {index} -> {index * 2}", "a run read another run's result"
        else:
            assert outcome["error_type"] == "PrefectApiError" and outcome["error"].startswith("prefect: "), outcome
    return sum(outcome["status"] == "completed" for outcome in outcomes.values())


# Many runs at once in one process: test_sessions.py (thirty sessions, twenty at once).


@pytest.mark.slow
def test_four_processes_of_five_runs_against_one_server(session_id):
    """Four processes at once against one SQLite server: every run completes or fails with
    a clear ``prefect:`` error (the server's lock), and no run reads another's result."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(HELPERS / "many_runs.py"), "5", f"{session_id}-{n}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    completed = 0
    for process in processes:
        out, err = process.communicate(timeout=900)
        completed += _check(_outcomes(subprocess.CompletedProcess(process.args, process.returncode, out, err), 5))
    assert completed >= 15, f"only {completed} of 20 runs completed against one SQLite server"


@pytest.mark.slow
async def test_over_acp_another_prompt_reruns_a_served_call_with_the_same_arguments(agent, session_id):
    """Served call ids derive from name and arguments, so before keys chained, a rerun with
    another prompt always replayed the old run's served results."""
    from nexusflow import Transport, create_cli_client

    added: list[tuple[int, int]] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        added.append((a, b))
        return a + b + len(added) * 100

    served = [{"tool": "add", "arguments": {"a": 1, "b": 2}}, {"say": "done"}]
    agent.script([served, served])
    client = create_cli_client(style=agent.style, command=agent.command, transport=Transport.ACP, env=agent.env)
    async with await Toolkit.load(tools=[add]) as toolkit:
        first = await client.run("first", toolkit, session_id=session_id)
        second = await client.run("second", toolkit, session_id=session_id)
    assert first.status == second.status == "completed", (first.error, second.error)
    assert added == [(1, 2), (1, 2)], "the second prompt's served call ran: its turn is another turn"
    assert [entry["text"] for entry in agent.log("tool_result")] == ["103", "203"]
