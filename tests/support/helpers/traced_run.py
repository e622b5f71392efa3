"""A run traced into an in-memory OpenTelemetry exporter, in a process of its own (the tracer
provider is set once per process, for good): ``plain`` a 2-turn run with a tool call,
``resumed`` a run that waits for an approval and is resumed with it (its first turn replays),
``sub-agent`` a run whose tool is another agent.
Prints the spans, then the runs' metrics, one JSON line each."""

from __future__ import annotations

import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nexusflow import Toolkit, create_in_process_client, current_answer, suspend, tool
from nexusflow.messages import Answer

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


@tool
def add(a: int, b: int) -> int:
    """Adds."""
    return a + b


@tool
def launch(rocket: str) -> str:
    """Launches, once approved."""
    if current_answer() is None:
        return suspend(f"May I launch {rocket}?")  # type: ignore[return-value]
    return f"launched {rocket}"


def model(request):  # type: ignore[no-untyped-def]
    tool_name = "launch" if "launch" in str(request.messages[-1]) or sys.argv[1] == "resumed" else "add"
    if len(request.messages) < 3:
        arguments = {"rocket": "R1"} if tool_name == "launch" else {"a": 2, "b": 3}
        return {
            "tool_calls": [{"id": "c1", "name": tool_name, "arguments": arguments}],
            "usage": {"input_tokens": 10, "output_tokens": 2},
        }
    return {"content": "done", "usage": {"input_tokens": 20, "output_tokens": 1}}


client = create_in_process_client(model, model="scripted-1")
results = []
if sys.argv[1] == "plain":
    results.append(client.run_sync("add 2 and 3", Toolkit([add])))
elif sys.argv[1] == "sub-agent":
    reviewer = create_in_process_client(lambda request: "looks good", model="reviewer-1")

    def asking(request):  # type: ignore[no-untyped-def]
        if len(request.messages) < 3:
            return {"tool_calls": [{"id": "r1", "name": "reviewer", "arguments": {"prompt": "review it"}}]}
        return {"content": "reviewed"}

    writer = create_in_process_client(asking, model="writer-1")
    results.append(writer.run_sync("write", Toolkit([reviewer.as_tool(name="reviewer", description="Reviews.")])))
else:
    waiting = client.run_sync("launch R1", Toolkit([launch]))
    results.append(waiting)
    assert waiting.request is not None, waiting
    results.append(client.resume_sync(waiting.session_id, Answer(id=waiting.request.id, ok=True), Toolkit([launch])))
provider.force_flush()
for span in exporter.get_finished_spans():
    print(
        json.dumps(
            {
                "name": span.name,
                "trace": format(span.context.trace_id, "032x"),
                "id": format(span.context.span_id, "016x"),
                "parent": format(span.parent.span_id, "016x") if span.parent else None,
                "status": span.status.status_code.name,
                "attributes": dict(span.attributes or {}),
                "links": [format(link.context.trace_id, "032x") for link in span.links],
            }
        )
    )
for result in results:
    print(
        json.dumps(
            {
                "metrics": result.metrics.model_dump(mode="json"),
                "status": result.status,
                "flow_run_id": result.flow_run_id,
            }
        )
    )
