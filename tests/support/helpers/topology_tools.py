"""Tools for the multi-machine tests (tests/topology/test_topology.py), loaded by deployment runs on
the topology's workers as ``tests/support/helpers/topology_tools.py:TOOLS``.

Each execution records itself in the side-effect bucket of the S3 server (the machines share
nothing else with the test): ``runs/<session>/<n>/<event>-<uuid>.json`` with the machine's
HOME and the flow process's pid. That log is the tools' own, not nexusflow state, so the
test counts what really ran, on which machine.

Run as a script, it is a slow agent CLI instead (``slow_turn``)."""

from __future__ import annotations

import json
import os
import re
import sys
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


def slow_turn() -> None:
    """A fake agent CLI in the claude style, for the subscription-limit test. Each launch (one
    model turn, inside the run's slot) records itself under ``launches/<tag>/`` (the tag is
    the prompt's: "slow turn <tag>"), waits for the gate of that tag to open, takes two
    seconds, records when it was launched and ended and on which machine under
    ``turns/<tag>/``, and answers. Its launch is marked once its imports are done, so launch
    to end lies within the slot's hold; the turns of the two slots overlap at the gate, however
    long such a start takes on a loaded machine."""
    launched = time.time()
    found = re.search(r"slow turn ([A-Za-z0-9_-]+)", sys.stdin.read())
    assert found is not None, "the prompt names no tag"
    tag = found.group(1)
    _s3().put_object(Bucket=SIDE_EFFECTS, Key=f"launches/{tag}/{uuid.uuid4().hex}", Body=b"")
    while not _gate_open(tag):
        time.sleep(0.2)
    time.sleep(2)
    body = json.dumps({"launched": launched, "end": time.time(), "home": os.environ["HOME"]})
    _s3().put_object(Bucket=SIDE_EFFECTS, Key=f"turns/{tag}/{uuid.uuid4().hex}.json", Body=body)
    print(json.dumps({"type": "result", "is_error": False, "result": json.dumps({"content": "done"})}))


if __name__ == "__main__":
    slow_turn()
