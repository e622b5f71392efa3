"""Tools for the multi-machine tests (tests/test_topology.py), loaded by deployment runs on
the topology's workers as ``tests/helpers/topology_tools.py:TOOLS``.

Each execution records itself in the side-effect bucket of the S3 server (the machines share
nothing else with the test): ``runs/<session>/<n>/<event>-<uuid>.json`` with the machine's
HOME and the flow process's pid. That log is the tools' own, not nexusflow state, so the
test counts what really ran, on which machine."""

from __future__ import annotations

import json
import os
import time
import uuid

import boto3
from botocore.exceptions import ClientError

from nexusflow import tool

SIDE_EFFECTS = "side-effects"
"""The bucket of the tools' own log (AWS_ENDPOINT_URL and credentials come from the env)."""


def _s3():  # type: ignore[no-untyped-def]
    return boto3.client("s3")


def _record(session: str, n: int, event: str) -> None:
    body = json.dumps({"n": n, "event": event, "home": os.environ["HOME"], "pid": os.getpid()})
    _s3().put_object(Bucket=SIDE_EFFECTS, Key=f"runs/{session}/{n}/{event}-{uuid.uuid4().hex}.json", Body=body)


def _gate_open(gate: str) -> bool:
    try:
        _s3().head_object(Bucket=SIDE_EFFECTS, Key=f"gates/{gate}")
    except ClientError:
        return False
    return True


@tool
def step(session: str, n: int, gate: str | None = None) -> int:
    """Step ``n`` of a job: records its start, waits until ``gate`` is opened (a long tool
    that the test kills its process in), records its end, returns n squared."""
    _record(session, n, "start")
    while gate is not None and not _gate_open(gate):
        time.sleep(0.2)
    _record(session, n, "end")
    return n * n


TOOLS = [step]
