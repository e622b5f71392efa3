"""Tracing off, the default (nexusflow/_support/tracing.py): no tracer, no span, nothing added
to a launched CLI's environment; on, a CLI launched in a turn is told the turn's identity in
``OTEL_RESOURCE_ATTRIBUTES``, after what the environment gave it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider

from nexusflow._support import tracing


@pytest.fixture(autouse=True)
def _no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tracing, "_set_up", None)


def test_without_a_provider_or_an_endpoint_nothing_is_traced() -> None:
    assert isinstance(trace.get_tracer_provider(), ProxyTracerProvider)
    assert tracing.tracer() is None
    with tracing.span("chat", {"gen_ai.operation.name": "chat"}) as current:
        assert current is None
    tracing.replayed("chat", {})
    with tracing.identity("s1", "f1", 3):
        assert tracing.resource_environment({}) == {}


def test_a_cli_is_told_the_turn_it_works_for_after_what_its_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "tracer", lambda: object())
    assert tracing.resource_environment({}) == {}, "outside a turn: nothing"
    with tracing.identity("s 1,=", "f1", 3):
        told = tracing.resource_environment({"OTEL_RESOURCE_ATTRIBUTES": "team=infra,"})
    ours = "nexusflow.session.id=s%201%2C%3D,prefect.flow_run.id=f1,nexusflow.turn=3"
    assert told == {"OTEL_RESOURCE_ATTRIBUTES": f"team=infra,{ours}"}


OWN_PROVIDER = """
import os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from nexusflow._support import tracing

own = TracerProvider()
trace.set_tracer_provider(own)
os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
print(tracing.configure(), trace.get_tracer_provider() is own, tracing.tracer() is not None)
"""


def test_a_provider_the_program_set_is_used_as_it_is_whatever_the_endpoint_says() -> None:
    """OpenTelemetry takes one provider per process: setting a second only warned."""
    done = subprocess.run([sys.executable, "-c", OWN_PROVIDER], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "True"]
    assert "Overriding" not in done.stderr, done.stderr
