"""A run the user interrupts ends ``Cancelled``, its session resumable: Ctrl-C (SIGINT) and
SIGTERM (a ``kill``, a service manager, a Prefect worker's cancel).

Left to themselves, Prefect 3.9.1's engines take either for a crash: asyncio's SIGINT handler
cancels the main task, and both engines mark a run that a cancellation went through
``Crashed`` and log ``Crash detected!`` at ERROR; Prefect's SIGTERM handler raises
``TerminationSignal`` wherever the main thread is, often in the event loop's ``select``,
outside the flow, and the run crashes as the loop shuts down. The flow engine already knows
a cancel, though: a cancellation it sees while the runner's control intent is ``cancel``
moves the flow run through Cancelling to Cancelled. So while the outermost run's body runs,
both signals are answered the same way: the intent is set to ``cancel`` (Prefect's private
``control_listener``, checked on 3.9.1) and the task that runs the flow is cancelled, as
asyncio does for SIGINT. ``Client.run`` then moves the task runs that the cancellation went
through from Crashed to Cancelled and pins the message on the flow run (``cancelled``).
A second signal acts as it would have without this.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import FrameType
from typing import Any
from uuid import UUID

import anyio
from prefect._internal import control_listener
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    TaskRunFilter,
    TaskRunFilterState,
    TaskRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.states import Cancelled

from .._secrets import get_logger
from ..errors import cancelled_by_signal, describe

logger = get_logger("nexusflow.interrupt")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
SETTLE_WITHIN = 10.0
"""Seconds that moving an interrupted run's states may take before it is given up with a warning."""


@dataclass
class Interrupted:
    """The signal that interrupted a run of this process, and which run."""

    signal: int
    session_id: str
    flow_run_id: str
    owns_intent: bool
    """Whether nexusflow set Prefect's cancel intent (a Prefect runner's cancel sets its own)."""
    sigint: Any
    """The SIGINT handler before the run (asyncio's, or Python's)."""


_caught: Interrupted | None = None
_installed = False
_armed: ContextVar[bool] = ContextVar("nexusflow_interrupt_armed", default=False)


def caught() -> Interrupted | None:
    return _caught


@contextmanager
def armed(outermost: bool) -> Iterator[None]:
    """``Client.run`` arms the run it starts when no flow encloses it: a run inside a user's
    flow leaves signals to that flow's engine."""
    token = _armed.set(outermost)
    try:
        yield
    finally:
        _armed.reset(token)


class _InterruptIsNoCrash(logging.Filter):
    """While an interrupt ends the run, Prefect's ``Crash detected!`` lines go (the run is
    cancelled, not crashed), and its ``Finished in state ...`` lines and the toolkit's word
    on a sync tool left running in its thread are INFO: the user stopped the run, and the
    command says how to go on in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _caught is None or record.levelno <= logging.INFO:
            return True
        text = str(record.msg)
        if text.startswith("Crash detected!"):
            return False
        if text.startswith(("Finished in state ", 'tool "%s" was cancelled')):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_filter = _InterruptIsNoCrash()


@asynccontextmanager
async def interruptible(session_id: str, flow_run_id: str) -> AsyncIterator[None]:
    """Answer SIGINT and SIGTERM by cancelling this run, for the body (a run ``armed`` by
    ``Client.run``, in the main thread; elsewhere nothing changes)."""
    global _installed
    task = asyncio.current_task()
    if not _armed.get() or _installed or task is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    before: dict[int, Any] = {number: signal.getsignal(number) for number in SIGNALS}

    def handler(number: int, frame: FrameType | None) -> Any:
        global _caught
        if _caught is not None or not installed or task.done():
            # A second signal, or a handler left behind (runs side by side restore each
            # other's handlers in any order): what the signal does without nexusflow.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if number == signal.SIGINT:
                raise KeyboardInterrupt
            os.kill(os.getpid(), number)
            return
        owns = control_listener.get_intent() is None
        if owns:
            control_listener._set_intent("cancel")
        _caught = Interrupted(number, session_id, flow_run_id, owns, before[signal.SIGINT])
        task.cancel()
        loop.call_soon_threadsafe(lambda: None)

    for name in ("prefect.flow_runs", "prefect.task_runs", "nexusflow.toolkit"):
        logging.getLogger(name).addFilter(_filter)  # adding it twice is a no-op
    for number in SIGNALS:
        signal.signal(number, handler)
    _installed = installed = True
    try:
        yield
    finally:
        _installed = installed = False
        if _caught is None:
            _restore(before)
        # else: ``settle`` restores them, once the flow run's state is recorded


def _restore(handlers: dict[int, Any]) -> None:
    for number, handler in handlers.items():
        signal.signal(number, handler)


async def settle(raised: BaseException, nested: bool) -> BaseException:
    """After the run ended by an interrupt: its task runs that the cancellation crashed, and
    the flow run, read ``Cancelled`` with the pinned message. Returns what to raise: for the
    outermost run of a process, ``KeyboardInterrupt`` for SIGINT (as Python does) and
    ``SystemExit(143)`` for SIGTERM (the status of a process that SIGTERM ended); inside
    another flow, what was raised, for that flow's engine to cancel it too."""
    global _caught
    interrupted = _caught
    assert interrupted is not None
    if nested:  # a sub-agent's run: the outermost one settles, once its own engine has cancelled it
        return raised
    message = cancelled_by_signal(interrupted.session_id, signal.Signals(interrupted.signal).name)
    with anyio.CancelScope(shield=True):
        try:
            with anyio.fail_after(SETTLE_WITHIN):
                await _cancelled(UUID(interrupted.flow_run_id), message)
        except Exception as exc:
            logger.warning("could not mark flow run %s Cancelled: %s", interrupted.flow_run_id, describe(exc))
    if interrupted.owns_intent:
        control_listener.clear_intent()
    _caught = None
    signal.signal(signal.SIGINT, interrupted.sigint)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # Prefect's engine left it to us while the intent was set
    if interrupted.signal == signal.SIGINT:
        return KeyboardInterrupt()
    return SystemExit(128 + interrupted.signal)


async def _cancelled(flow_run_id: UUID, message: str) -> None:
    async with get_client() as client:
        crashed = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
            task_run_filter=TaskRunFilter(
                state=TaskRunFilterState(
                    type=TaskRunFilterStateType(any_=[StateType.CRASHED, StateType.RUNNING, StateType.PENDING])
                )
            ),
        )
        for task_run in crashed:
            await client.set_task_run_state(task_run.id, Cancelled(message=message), force=True)
        run = await client.read_flow_run(flow_run_id)
        if run.state is None or run.state.type in (StateType.CANCELLED, StateType.CANCELLING, StateType.CRASHED):
            await client.set_flow_run_state(flow_run_id, Cancelled(message=message), force=True)
