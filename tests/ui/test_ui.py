"""What an operator sees: the Prefect UI, rendered in a real headless Chromium (Debian's
chromium, driven by Python playwright through executable_path; no browser is downloaded),
against the session's real Prefect server, which serves the UI at the root of its port.

One run, made once for the module: turn 0 calls ``lookup`` twice (Oslo, Bergen) and a tool
that raises; turn 1 answers. The tests read its pages: the flow run's task runs, a tool's
page, the errored tool's page, a turn's page and the summary artifact. Full-page screenshots
go to each test's tmp_path (their paths are printed: ``pytest -s``), and are copied to
``$NEXUSFLOW_UI_SHOTS`` (a folder; ``1`` means /tmp/nexusflow-ui-shots) when it is set.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

from nexusflow import Toolkit, create_in_process_client, tool
from nexusflow.testing import ScriptedModel

from helpers.prefect_api import task_runs

pytestmark = [pytest.mark.xdist_group("ui")]  # one browser and one run for the module

CHROMIUM = Path("/usr/bin/chromium")
# As the machine's probe drove it: without the background-networking flags Chromium keeps
# reaching for Google's hosts, which this closed network refuses.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000
SHOTS_DEFAULT = Path("/tmp/nexusflow-ui-shots")


def _missing(reason: str) -> None:
    """A missing browser skips a developer's run, and fails CI's."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: .ci/install-browser installs it)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


if not CHROMIUM.exists():
    _missing(f"{CHROMIUM} is missing: run .ci/install-browser")
try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - only without the test extra
    _missing('playwright is not installed: pip install -e ".[test]"')


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"weather in {city}: 12 C, light rain"


@tool
def forecast(city: str) -> str:
    """Tomorrow's weather in a city; its service is down."""
    raise RuntimeError(f"no forecast service for {city}")


@dataclass
class Run:
    session_id: str
    flow_run_id: str
    task_runs: dict[str, str]
    """Task run name -> id, as the API has them."""

    @property
    def summary_key(self) -> str:
        # The slug rule of the run's artifact keys (flows/agent.py); this session id is a slug.
        return "summary-" + re.sub(r"[^a-z0-9-]+", "-", self.session_id.lower()).strip("-")


async def _make_run() -> Run:
    session_id = f"ui-weather-{os.urandom(4).hex()}"
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "lookup", "arguments": {"city": "Oslo"}},
                    {"name": "lookup", "arguments": {"city": "Bergen"}},
                    {"name": "forecast", "arguments": {"city": "Oslo"}},
                ]
            },
            "Oslo and Bergen: 12 C, light rain; no forecast.",
        ]
    )
    async with await Toolkit.load(tools=[lookup, forecast]) as toolkit:
        result = await create_in_process_client(model).run("The weather?", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.metrics.tool_calls == 3 and result.metrics.tool_errors == 1

    runs = await task_runs(result.flow_run_id, expected=5)
    # Logs reach the server in batches after the flow returns: wait for the flow run's last line.
    deadline = time.monotonic() + 60
    async with get_client() as client:
        while True:
            logs = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(result.flow_run_id)]))
            )
            if any(log.task_run_id is None and "Finished in state" in log.message for log in logs):
                break
            assert time.monotonic() < deadline, "the flow run's logs never reached the server"
            await anyio.sleep(0.5)
    return Run(session_id, result.flow_run_id, {run.name: str(run.id) for run in runs})


@pytest.fixture(scope="module")
def run(prefect_server: str) -> Run:
    # In a thread of its own: playwright's sync API keeps an event loop on the main thread.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, _make_run).result()


@pytest.fixture(scope="module")
def ui(prefect_server: str) -> str:
    """The UI's address: the root of PREFECT_API_URL, without /api."""
    return prefect_server.removesuffix("/").removesuffix("/api")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def page(browser: Browser, ui: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    """One page for the module, on an app that has rendered and reached its API."""
    context = browser.new_context(viewport={"width": 1400, "height": 1400}, base_url=ui)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)
    page.goto("/", wait_until="networkidle")
    expect(page.get_by_role("link", name="Runs").first).to_be_visible()
    try:
        expect(page.get_by_text("Can't connect to Server API")).to_have_count(0)
    except AssertionError:
        page.screenshot(path=str(tmp_path_factory.mktemp("ui-root") / "root.png"), full_page=True)
        raise
    yield page
    context.close()


def shoot(page: Page, tmp_path: Path, name: str) -> Path:
    """A full-page screenshot into the test's tmp_path, and into $NEXUSFLOW_UI_SHOTS if set."""
    page.wait_for_load_state("networkidle")
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    shots = os.environ.get("NEXUSFLOW_UI_SHOTS")
    if shots:
        folder = SHOTS_DEFAULT if shots == "1" else Path(shots)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / path.name)
        print(f"screenshot: {folder / path.name}")
    return path


def open_tab(page: Page, tab_id: str) -> Any:
    """Click one of the run page's tabs (``task-runs``, ``artifacts``, ``logs``) and return
    its panel."""
    page.locator(f"[role=tablist] li#{tab_id}").click()
    panel = page.locator(f"#{tab_id}-content")
    expect(panel).to_be_visible()
    page.wait_for_load_state("networkidle")
    return panel


def open_flow_run(page: Page, run: Run) -> None:
    page.goto(f"/runs/flow-run/{run.flow_run_id}", wait_until="networkidle")
    expect(page.get_by_text(f"agent-{run.session_id}").first).to_be_visible()


def open_task_run(page: Page, run: Run, name: str) -> Any:
    """The task run's own page, once its logs have loaded; returns the logs panel."""
    assert name in run.task_runs, f"no task run named {name!r}: the API has {sorted(run.task_runs)}"
    page.goto(f"/runs/task-run/{run.task_runs[name]}", wait_until="networkidle")
    expect(page.get_by_text(name, exact=True).first).to_be_visible()
    logs = page.locator("#logs-content")
    expect(logs).to_contain_text("Finished in state")  # the logs load after the page
    return logs


def task_run_rows(page: Page) -> dict[str, str]:
    """The flow run page's Task Runs tab as rendered: task run name -> its state badge."""
    panel = open_tab(page, "task-runs")
    items = panel.locator(".task-run-list-item")
    expect(items.first).to_be_visible()
    rows: dict[str, str] = {}
    for item in items.all():
        name = item.locator("a[href^='/runs/task-run/']").first.inner_text().strip()
        badge = item.locator(".state-badge").first.inner_text().strip()
        assert name not in rows, f"two task runs render as {name!r}"
        rows[name] = badge
    return rows


def test_the_flow_run_page_shows_every_task_run_under_its_own_name(page, run, tmp_path):
    open_flow_run(page, run)
    shoot(page, tmp_path, "flow-run")
    rows = task_run_rows(page)
    shoot(page, tmp_path, "flow-run-task-runs")
    assert sorted(rows) == sorted(["turn-0", "tool-0-lookup", "tool-0-lookup-2", "tool-0-forecast", "turn-1"])


def test_an_errored_tool_is_visibly_distinct_and_says_why(page, run, tmp_path):
    open_flow_run(page, run)
    rows = task_run_rows(page)
    assert rows.get("tool-0-forecast") == "ToolError", rows
    assert {rows.get("tool-0-lookup"), rows.get("turn-0"), rows.get("turn-1")} == {"Completed"}, rows

    logs = open_task_run(page, run, "tool-0-forecast")
    shoot(page, tmp_path, "errored-tool")
    expect(page.locator(".state-badge").first).to_have_text("ToolError")
    expect(logs).to_contain_text('arguments: {"city": "Oslo"}')
    expect(logs).to_contain_text("error: ")
    expect(logs).to_contain_text("no forecast service for Oslo")


def test_a_tool_page_shows_its_arguments_and_result(page, run, tmp_path):
    logs = open_task_run(page, run, "tool-0-lookup")
    shoot(page, tmp_path, "tool-page")
    expect(page.locator(".state-badge").first).to_have_text("Completed")
    expect(logs).to_contain_text('arguments: {"city": "Oslo"}')
    expect(logs).to_contain_text("result: weather in Oslo: 12 C, light rain")

    # The second call of the same tool in the same turn is the one with the suffix.
    logs = open_task_run(page, run, "tool-0-lookup-2")
    expect(logs).to_contain_text('arguments: {"city": "Bergen"}')
    expect(logs).to_contain_text("result: weather in Bergen: 12 C, light rain")


def test_a_turn_page_shows_what_the_model_decided(page, run, tmp_path):
    logs = open_task_run(page, run, "turn-0")
    shoot(page, tmp_path, "turn-page")
    expect(logs).to_contain_text('calls: lookup({"city": "Oslo"}), lookup({"city": "Bergen"})')
    expect(logs).to_contain_text(
        re.compile(r"seconds [0-9.]+ · tokens (\d+|\?) in / (\d+|\?) out · cost \$\S+ · launches \d+")
    )
    logs = open_task_run(page, run, "turn-1")
    expect(logs).to_contain_text("answer: Oslo and Bergen: 12 C, light rain; no forecast.")


def test_the_summary_artifact_is_on_the_flow_run_page_and_renders_its_table(page, run, tmp_path):
    open_flow_run(page, run)
    panel = open_tab(page, "artifacts")
    card = panel.locator("a[href^='/artifacts/artifact/']", has_text=run.summary_key)
    expect(card).to_have_count(1)
    shoot(page, tmp_path, "flow-run-artifacts")

    page.goto(card.get_attribute("href") or "", wait_until="networkidle")
    table = page.locator("article.markdown-renderer table").first
    expect(table).to_be_visible()
    shoot(page, tmp_path, "summary")
    headers = [cell.strip() for cell in table.locator("th").all_inner_texts()]
    assert headers == ["#", "kind", "step", "status", "seconds", "replayed", "usage"]
    cells = [[cell.strip() for cell in row.locator("td").all_inner_texts()] for row in table.locator("tr").all()]
    rows = {row[2]: row for row in cells if len(row) == 7}
    assert sorted(rows) == sorted(["turn-0", "tool-0-lookup", "tool-0-lookup-2", "tool-0-forecast", "turn-1"])
    assert rows["tool-0-forecast"][1:4:2] == ["tool", "ToolError"]
    assert rows["turn-1"][1:4:2] == ["turn", "Completed"]
    assert rows["turn-1"][0] == "5", "the table lists steps in the order they finished: the answer is last"
    assert rows["turn-1"][6] == "tokens ? in / ? out · cost $?", "a model that reports no usage shows it unknown"
    # Then the run's metrics, in whatever layout (a table row reads "tool errors\t1").
    text = " ".join(page.locator("article.markdown-renderer").all_inner_texts()).lower()
    for metric, value in (("turns", "2"), ("tool calls", "3"), ("tool errors", "1"), ("status", "completed")):
        assert re.search(rf"\b{metric}\W+{value}\b", text), f"the summary lacks {metric} = {value}"
    for metric in ("launches", "tokens", "model seconds", "tool seconds"):
        assert metric in text, f"the summary lacks the metric {metric!r}"
