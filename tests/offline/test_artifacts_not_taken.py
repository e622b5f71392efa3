"""A run's artifacts are the UI's view of it, not its outcome: a write that the Prefect API
does not take (here a closed port, as a server that is restarting) is one INFO line and the
run goes on; a failure that is not the API's passing trouble is still raised. The whole
path, a server stopped and started again under a run: tests/homes/test_server_restart.py."""

from __future__ import annotations

import logging

import pytest

from nexusflow.flows import report
from nexusflow.flows.report import ARTIFACT_NOT_TAKEN, PROGRESS_PAUSE, Progress, publish
from nexusflow.messages import RunResult

pytestmark = [
    pytest.mark.anyio,
    # a run writes them inside its flow run; with no server here there is none to be inside
    pytest.mark.filterwarnings("ignore:Artifact creation outside of a flow or task run:FutureWarning"),
]


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "nexusflow.server" and r.levelno == logging.INFO]


async def test_a_progress_write_the_api_does_not_take_is_one_line_and_pauses_the_next(caplog):
    progress = Progress("s-1", max_turns=10, interval=0.0)
    with caplog.at_level(logging.INFO, logger="nexusflow.server"):
        await progress.turn_done(1)
        await progress.turn_done(2)  # within the pause: not tried again
    (line,) = _said(caplog)
    assert line.startswith(ARTIFACT_NOT_TAKEN.split(" (")[0] % ("progress", "s-1")), line
    assert "ConnectError" in line, line
    assert progress.artifact is None
    assert progress.updated - progress.started >= PROGRESS_PAUSE


async def test_the_end_of_runs_artifacts_the_api_does_not_take_are_a_line_each(caplog):
    with caplog.at_level(logging.INFO, logger="nexusflow.server"):
        await publish(RunResult(status="completed", text="done", session_id="s-2"), [])
    assert sorted(line.split(" (")[0] for line in _said(caplog)) == [
        ARTIFACT_NOT_TAKEN.split(" (")[0] % (kind, "s-2") for kind in ("summary", "transcript")
    ]


async def test_an_artifact_write_that_fails_otherwise_is_raised(monkeypatch):
    async def refused(**_: object) -> None:
        raise ValueError("markdown too large")

    monkeypatch.setattr(report, "acreate_markdown_artifact", refused)
    with pytest.raises(ExceptionGroup) as raised:
        await publish(RunResult(status="completed", text="done", session_id="s-3"), [])
    assert raised.group_contains(ValueError, match="markdown too large")
