"""A run's trace in a receiver people read agent traces in: Arize Phoenix (``phoenix serve`` on
loopback, from its own venv: .ci/install-phoenix), fed by nothing but the standard
``OTEL_EXPORTER_OTLP_*`` variables. A run that waits for an approval and its resume: Phoenix's
own REST API shows each run's tree, the GenAI attributes, the replay marks and token sums equal
to ``RunResult.metrics``; its UI, in Debian's chromium, shows the resumed run's trace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from helpers.servers import free_port

VERSION = "20.26.1"
PHOENIX = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nexusflow" / "phoenix" / VERSION
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-sync"]
SHOTS = Path(os.environ.get("NEXUSFLOW_UI_SHOTS", "/tmp/nexusflow-ui-shots"))


def _missing(reason: str) -> None:
    """A missing part skips a developer's run, and fails CI's."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: .ci/run installs it)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


if not (PHOENIX / ".complete").exists():
    _missing(f"Arize Phoenix is not installed in {PHOENIX}: run .ci/install-phoenix")
if not CHROMIUM.exists():
    _missing(f"{CHROMIUM} is missing: run .ci/install-browser")

RUN = """
import json
from nexusflow import Toolkit, create_in_process_client, current_answer, suspend, tool
from nexusflow.messages import Answer

@tool
def launch(rocket: str) -> str:
    '''Launches, once approved.'''
    if current_answer() is None:
        return suspend(f"May I launch {rocket}?")
    return f"launched {rocket}"

def model(request):
    if len(request.messages) < 3:
        call = {"id": "c1", "name": "launch", "arguments": {"rocket": "R1"}}
        return {"tool_calls": [call], "usage": {"input_tokens": 120, "output_tokens": 14}}
    return {"content": "R1 is launched.", "usage": {"input_tokens": 180, "output_tokens": 9}}

client = create_in_process_client(model, model="scripted-1")
waiting = client.run_sync("Launch R1.", Toolkit([launch]))
done = client.resume_sync(waiting.session_id, Answer(id=waiting.request.id, ok=True), Toolkit([launch]))
for result in (waiting, done):
    usage = result.metrics.usage.model_dump()
    print(json.dumps({"flow_run_id": result.flow_run_id, "status": result.status, "usage": usage}))
"""


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)


def _spans(phoenix: str, project: str) -> list[dict[str, Any]]:
    """The project's spans; none before its first span has come (Phoenix: 404)."""
    try:
        return list(_get(f"{phoenix}/v1/projects/{project}/spans?limit=1000")["data"])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    with open(tmp_path / "phoenix.log", "wb") as log:
        server = subprocess.Popen(
            [str(PHOENIX / "bin" / "phoenix"), "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, (tmp_path / "phoenix.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "phoenix.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=5):
                    break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_phoenix_shows_each_runs_tree_its_replays_and_its_tokens(prefect_server: str, phoenix: str):
    project = f"nexusflow-{uuid4().hex[:8]}"
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix,
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-project-name={project}",
    }
    done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    waiting, resumed = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    assert (waiting["status"], resumed["status"]) == ("pending", "completed")
    deadline = time.monotonic() + 60
    while len(spans := _spans(phoenix, project)) < 19:
        assert time.monotonic() < deadline, [span["name"] for span in spans]
        time.sleep(0.5)
    by_id = {span["context"]["span_id"]: span for span in spans}
    traces: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        traces.setdefault(span["context"]["trace_id"], []).append(span)
    assert len(traces) == 2, "one trace a run"
    for run in (waiting, resumed):
        (trace,) = [
            members
            for members in traces.values()
            if any(span["attributes"].get("prefect.flow_run.id") == run["flow_run_id"] for span in members)
        ]
        (root,) = [span for span in trace if not span.get("parent_id")]
        (agent,) = [span for span in trace if span["name"] == "invoke_agent nexusflow"]
        assert root["name"].startswith("agent-") and by_id[agent["parent_id"]] is root
        assert agent["span_kind"] == "AGENT"
        chats = [span for span in trace if span["name"] == "chat scripted-1"]
        assert {span["span_kind"] for span in chats} == {"LLM"}
        assert {span["span_kind"] for span in trace if span["name"] == "execute_tool launch"} == {"TOOL"}
        live = [span for span in chats if not span["attributes"].get("nexusflow.replayed")]
        for kind in ("input_tokens", "output_tokens"):
            assert sum(span["attributes"][f"gen_ai.usage.{kind}"] for span in live) == run["usage"][kind]
    (after,) = [
        members for members in traces.values() if any(s["attributes"].get("nexusflow.replayed") for s in members)
    ]
    replayed = sorted(span["name"] for span in after if span["attributes"].get("nexusflow.replayed"))
    assert replayed == ["chat scripted-1", "execute_tool launch"]
    assert not any(
        name.startswith("gen_ai.usage.")
        for span in after
        if span["attributes"].get("nexusflow.replayed")
        for name in span["attributes"]
    ), "a replayed step reports no usage"
    from playwright.sync_api import expect, sync_playwright

    (found,) = [one for one in _get(f"{phoenix}/v1/projects")["data"] if one["name"] == project]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{phoenix}/projects/{found['id']}/traces/{after[0]['context']['trace_id']}")
            expect(page.get_by_text("invoke_agent nexusflow").first).to_be_visible(timeout=60_000)
            expect(page.get_by_text("tool-0-launch-approved").first).to_be_visible(timeout=30_000)
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "phoenix-trace.png"))
        finally:
            browser.close()
