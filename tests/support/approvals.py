"""The approval set-up the suspension tests share: a ``deploy`` tool that asks "May I deploy
SERVICE?" before it acts, and deploys once answered.

Tests that read what was deployed take the ``approval`` fixture (tests/conftest.py): a fresh
tool and record for each test, so what one test deployed is never another's to clear. The
tool's name, its question and its result are pinned by the tests' assertions (the scripted
models call ``deploy`` by name): a change here is a change to what they assert.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexusflow import FunctionTool, current_answer, suspend, tool

ASKING_DEPLOY = '''
from nexusflow import current_answer, suspend, tool

@tool
def deploy(service: str) -> str:
    """Deploy a service."""
    if current_answer() is None:
        return suspend(f"May I deploy {service}?")
    return f"deployed {service}"
'''
"""The tool as source, for a tools file that the command or a child process imports by its
path (``--tools FILE:deploy``), and with the docstring the command's tests gave it; a test
appends the other tools its file needs."""


LOGGED_DEPLOY = ASKING_DEPLOY.replace(
    'return f"deployed {service}"',
    'with open(__import__("os").environ["DEPLOYED_LOG"], "a") as log:\n        log.write(service + "\\n")\n'
    '    return f"deployed {service}"',
)
"""``deploy`` that also writes each service it deployed to the file ``DEPLOYED_LOG`` names: for a
run in another process (``nexusflow mcp``'s), to count what its tool did."""


def gated_deploy(deployed: list[str] | None = None, *, with_data: bool = False) -> FunctionTool:
    """``deploy``, recording each service it deployed in ``deployed``. ``with_data``: it asks
    with ``{"service": SERVICE}`` as the request's data and says the answer's data back
    (``deployed SERVICE with DATA``), for tests that follow data both ways."""

    @tool
    def deploy(service: str) -> str:
        """Deploy a service, after approval."""
        answer = current_answer()
        if answer is None:
            return suspend(f"May I deploy {service}?", data={"service": service} if with_data else None)
        if deployed is not None:
            deployed.append(service)
        return f"deployed {service} with {answer.data}" if with_data else f"deployed {service}"

    return deploy


@dataclass(frozen=True)
class Approval:
    """A gated ``deploy`` and the services it deployed, in order."""

    deploy: FunctionTool
    deployed: list[str]

    @classmethod
    def fresh(cls, *, with_data: bool = False) -> Approval:
        deployed: list[str] = []
        return cls(gated_deploy(deployed, with_data=with_data), deployed)
