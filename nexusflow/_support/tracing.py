"""OpenTelemetry spans in the GenAI semantic conventions: one for the agent's run, one for each
model call and tool execution, nested in the flow and task run spans Prefect emits. On only
where OpenTelemetry is configured the standard way: a tracer provider the process set, or an
``OTEL_EXPORTER_OTLP_*`` endpoint (then nexusflow sets one up, from ``nexusflow[otel]``).
Off, a step pays one check of the global provider and nothing else."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from opentelemetry import trace
from opentelemetry.trace import Link, ProxyTracerProvider, Span, Status, StatusCode

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

logger = logging.getLogger("nexusflow.tracing")

SCOPE = "nexusflow"
REPLAYED = "nexusflow.replayed"
"""Set on the span of a step that was replayed from storage on a resume: nothing ran in it,
and its usage, reported when it first ran, is not reported again."""
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_set_up: bool | None = None
_OFF = nullcontext()
"""What a span or an identity is when tracing is off: one shared, reusable no-op."""
_identity: ContextVar[dict[str, str] | None] = ContextVar("nexusflow_turn_identity", default=None)


def tracer() -> Tracer | None:
    """The tracer spans go to, or None when OpenTelemetry is not configured."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, ProxyTracerProvider) and not configure():
        return None
    return trace.get_tracer(SCOPE)


def configure() -> bool:
    """Whether this process exports through an OTLP endpoint the environment names, setting
    its tracer provider up the first time it is asked: where a run starts (``use_server``),
    before Prefect opens a flow run's span, which would otherwise go nowhere."""
    global _set_up
    if _set_up is None:
        # A provider the program set itself (Logfire's configure(), its own SDK set-up) is
        # used as it is: OpenTelemetry allows one per process.
        own = not isinstance(trace.get_tracer_provider(), ProxyTracerProvider)
        _set_up = not own and any(os.environ.get(name) for name in _ENDPOINTS) and _provider_from_environment()
    return _set_up


def _provider_from_environment() -> bool:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning(
            "tracing: OTEL_EXPORTER_OTLP_ENDPOINT is set but the exporter is not installed: "
            "pip install 'nexusflow[otel]' (no spans are sent)"
        )
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", SCOPE)}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True


def span(name: str, attributes: Mapping[str, Any], links: Sequence[Link] = ()) -> AbstractContextManager[Span | None]:
    """A span current for the block (so the spans of what it calls nest in it), ended with
    an error status when the block raises; None, and nothing done, when tracing is off."""
    found = tracer()
    if found is None:
        return _OFF
    return found.start_as_current_span(name, attributes=_clean(attributes), links=links, record_exception=True)


def replayed(name: str, attributes: Mapping[str, Any]) -> None:
    """The span of a step replayed from storage: an instant, marked, with no usage in it."""
    found = tracer()
    if found is None:
        return
    now = time.time_ns()
    marked = found.start_span(name, attributes={**_clean(attributes), REPLAYED: True}, start_time=now)
    marked.end(end_time=now)


def failed(current: Span | None, message: str) -> None:
    """A step that ended in its own error (a tool's error, a failed turn) without raising."""
    if current is not None:
        current.set_status(Status(StatusCode.ERROR, message))


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in attributes.items() if value is not None}


def identity(session_id: str, flow_run_id: str | None, turn: int | None = None) -> AbstractContextManager[None]:
    """Who the CLI a turn launches works for, while the turn runs (``resource_environment``)."""
    if tracer() is None:
        return _OFF
    values = {"nexusflow.session.id": session_id, "prefect.flow_run.id": flow_run_id, "nexusflow.turn": turn}
    return _identified({name: str(value) for name, value in values.items() if value is not None})


@contextmanager
def _identified(values: dict[str, str]) -> Iterator[None]:
    token = _identity.set(values)
    try:
        yield
    finally:
        _identity.reset(token)


def resource_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` for a launched CLI, the turn's identity added to what the
    environment gives, so the CLI's own telemetry, where it exports any, joins our spans;
    nothing when tracing is off or outside a turn."""
    found = _identity.get()  # set only while tracing is on (``identity``)
    if found is None:
        return {}
    ours = ",".join(f"{name}={quote(value, safe='')}" for name, value in found.items())
    given = base.get("OTEL_RESOURCE_ATTRIBUTES", "").strip().strip(",")
    return {"OTEL_RESOURCE_ATTRIBUTES": f"{given},{ours}" if given else ours}
