"""OpenTelemetry spans of a run (nexusflow/_support/tracing.py), read from an in-memory
exporter in a process of its own (a tracer provider is set once per process): one trace per
run, the GenAI spans nested in Prefect's flow and task run spans, usage as reported and never
twice, replays marked, a resumed run linked to the run it resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from paths import HELPERS


def traced(scenario: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    done = subprocess.run(
        [sys.executable, str(HELPERS / "traced_run.py"), scenario], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [line for line in lines if "name" in line], [line for line in lines if "metrics" in line]


def parent_of(spans: list[dict[str, Any]], span: dict[str, Any]) -> str | None:
    return next((other["name"] for other in spans if other["id"] == span["parent"]), None)


def tokens(spans: list[dict[str, Any]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for span in spans:
        for name in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
            total[name] += span["attributes"].get(name, 0)
    return total


def test_a_run_is_one_trace_of_genai_spans_nested_in_prefects_flow_and_task_run_spans():
    spans, (result,) = traced("plain")
    assert len({span["trace"] for span in spans}) == 1, "one trace per run"
    (flow,) = [span for span in spans if span["parent"] is None]
    assert flow["name"].startswith("agent-") and flow["attributes"]["prefect.run.type"] == "flow"
    session = flow["name"].removeprefix("agent-")
    (agent,) = [span for span in spans if span["name"] == "invoke_agent nexusflow"]
    assert parent_of(spans, agent) == flow["name"]
    assert agent["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert agent["attributes"]["gen_ai.conversation.id"] == session
    assert agent["attributes"]["prefect.flow_run.id"] == result["flow_run_id"]
    chats = [span for span in spans if span["name"] == "chat scripted-1"]
    assert [parent_of(spans, chat) for chat in chats] == ["turn-0", "turn-1"]
    for chat in chats:
        assert chat["attributes"]["gen_ai.operation.name"] == "chat"
        assert chat["attributes"]["gen_ai.request.model"] == "scripted-1"
        assert chat["attributes"]["gen_ai.conversation.id"] == session
        assert "gen_ai.usage.cache_read.input_tokens" not in chat["attributes"], "absent when not reported, not 0"
    (tool,) = [span for span in spans if span["name"] == "execute_tool add"]
    assert parent_of(spans, tool) == "tool-0-add"
    assert {
        key: tool["attributes"][key] for key in ("gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.type")
    } == {
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    usage = result["metrics"]["usage"]
    assert tokens(chats) == {
        "gen_ai.usage.input_tokens": usage["input_tokens"],
        "gen_ai.usage.output_tokens": usage["output_tokens"],
    }
    assert not any("nexusflow.replayed" in span["attributes"] for span in spans)


def test_a_resumed_run_marks_its_replays_counts_no_usage_twice_and_links_the_run_it_resumes():
    spans, (waiting, resumed) = traced("resumed")
    first, second = (waiting["flow_run_id"], resumed["flow_run_id"])
    agents = [span for span in spans if span["name"] == "invoke_agent nexusflow"]
    assert [agent["attributes"]["prefect.flow_run.id"] for agent in agents] == [first, second]
    before, after = agents
    assert before["trace"] != after["trace"], "one trace per run"
    assert after["links"] == [before["trace"]], "the resumed run links to the trace of the run it resumes"
    in_second = [span for span in spans if span["trace"] == after["trace"]]
    replayed = [span for span in in_second if span["attributes"].get("nexusflow.replayed")]
    assert sorted(span["name"] for span in replayed) == ["chat scripted-1", "execute_tool launch"]
    for span in replayed:
        assert not any(name.startswith("gen_ai.usage.") for name in span["attributes"]), span
        assert parent_of(spans, span) == "invoke_agent nexusflow"
    ran = [span for span in in_second if span["name"] == "execute_tool launch" and span not in replayed]
    assert [parent_of(spans, span) for span in ran] == ["tool-0-launch-approved"]
    for trace, result in ((before["trace"], waiting), (after["trace"], resumed)):
        chats = [span for span in spans if span["trace"] == trace and span["name"].startswith("chat ")]
        usage = result["metrics"]["usage"]
        assert tokens(chats) == {
            "gen_ai.usage.input_tokens": usage["input_tokens"],
            "gen_ai.usage.output_tokens": usage["output_tokens"],
        }, "each turn's tokens are in the trace of the run that paid them, once"


TRACED_BY_ENVIRONMENT = """
import threading
from nexusflow import Toolkit, create_in_process_client, tool
from nexusflow._support import tracing

@tool
def add(a: int, b: int) -> int:
    '''Adds.'''
    return a + b

def model(request):
    if len(request.messages) < 3:
        return {"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]}
    return {"content": "5"}

print(create_in_process_client(model).run_sync("add", Toolkit([add])).text)
print(tracing.tracer() is not None, sorted({thread.name.split("-")[0] for thread in threading.enumerate()}))
"""


class _Receiver(BaseHTTPRequestHandler):
    spans: ClassVar[list[tuple[str, str, str, bool]]] = []

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append((scope.scope.name, span.name, span.trace_id.hex(), bool(span.parent_span_id)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_a_sub_agents_run_is_inside_its_callers_trace_under_the_tool_call_that_ran_it():
    spans, (result,) = traced("sub-agent")
    assert len({span["trace"] for span in spans}) == 1, "the sub-agent's run is in its caller's trace"
    agents = [span for span in spans if span["name"] == "invoke_agent nexusflow"]
    caller, called = sorted(agents, key=lambda span: span["attributes"]["gen_ai.conversation.id"])
    assert called["attributes"]["gen_ai.conversation.id"] == caller["attributes"]["gen_ai.conversation.id"] + ".0.0"
    session = caller["attributes"]["gen_ai.conversation.id"]
    ancestors, above = [], called
    while above["parent"] is not None:
        above = next(span for span in spans if span["id"] == above["parent"])
        ancestors.append(above["name"])
    assert ancestors == [f"agent-{session}.0.0", "tool-0-reviewer", "invoke_agent nexusflow", f"agent-{session}"]
    (tool,) = [span for span in spans if span["name"] == "execute_tool reviewer"]
    assert parent_of(spans, tool) == "tool-0-reviewer"
    assert tool["attributes"]["gen_ai.tool.name"] == "reviewer"
    assert result["status"] == "completed"


@pytest.mark.slow
def test_an_otlp_endpoint_in_the_environment_is_enough_and_without_one_nothing_exports():
    """The standard variables alone: nexusflow sets the exporter up as its first run starts,
    before Prefect opens the flow run's span, so Prefect's spans and ours make one trace.
    Without them: no tracer, and no exporter thread."""
    receiver = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}"}
        done = subprocess.run(
            [sys.executable, "-c", TRACED_BY_ENVIRONMENT], env=env, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.splitlines()[-1].startswith("True")
    finally:
        receiver.shutdown()
    spans = _Receiver.spans
    assert len({trace for _, _, trace, _ in spans}) == 1, spans
    names = sorted((scope, name) for scope, name, _, _ in spans)
    assert [name for scope, name in names if scope == "nexusflow"] == [
        "chat",
        "chat",
        "execute_tool add",
        "invoke_agent nexusflow",
    ]
    assert sorted(name for scope, name in names if scope == "prefect")[1:] == ["tool-0-add", "turn-0", "turn-1"]
    assert [name for _, name, _, parented in spans if not parented] == [
        name for scope, name in names if name.startswith("agent-")
    ]
    plain = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    off = subprocess.run(
        [sys.executable, "-c", TRACED_BY_ENVIRONMENT], env=plain, capture_output=True, text=True, timeout=240
    )
    assert off.returncode == 0, off.stderr[-3000:]
    on, threads = off.stdout.splitlines()[-1].split(" ", 1)
    assert on == "False"
    assert "OtelBatchSpanProcessor" not in threads, threads
