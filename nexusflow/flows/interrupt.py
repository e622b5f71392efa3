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
``control_listener``, checked on 3.9.1, reached through ``_prefect/engine.py``) and the task
that runs the flow is cancelled, as asyncio does for SIGINT. ``Client.run`` then moves the
task runs that the cancellation went through from Crashed to Cancelled and pins the message
on the flow run (``cancelled``).
A second signal acts as it would have without this.

``run_sync`` runs the flow in Prefect's event loop thread while the main thread waits, and
only the main thread may set a signal handler: ``relayed`` sets ours there for the wait, and
the run's ``interruptible`` (in the loop's thread) names the task it would cancel.

A deployment's run of ``agent_job`` (``subflow=False``) is the outermost flow run of a
process that a Prefect runner (a worker, ``serve``) started. Its cancel (the UI's, or
``prefect flow-run cancel``) sets the cancel intent over the runner's control channel, then
sends SIGTERM to the process group, then marks the run ``Cancelled`` once the process is gone.
Prefect's own SIGTERM bridge raises ``TerminationSignal`` in the event loop's ``select``:
the loop shuts down with an unhandled-exception traceback at ERROR and the in-flight task
runs end ``Crashed`` (measured on 3.9.1). Armed there too (``in_deployment``), the same
handler cancels the flow's task instead; ``settle_in_flow`` moves its task runs to
``Cancelled`` and hands the cancellation back to the engine, which ends the process for the
runner to record. A SIGTERM its runner did not send (a ``kill`` of the run's process, a
container's stop) finds no intent set: nexusflow sets it, so the engine ends the process
with status 0 and the runner records nothing; ``settle_in_flow`` then cancels the flow run
itself and passes the signal on to the rest of the process group, as the runner would have.
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
from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    TaskRunFilter,
    TaskRunFilterState,
    TaskRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.states import Cancelled

from .._prefect.engine import cancel_intended, clear_intent, intend_cancel, intent_unset
from .._prefect.logs import CRASH_DETECTED, FINISHED, FLOW_RUNS, TASK_RUNS, add_filter
from .._support.secrets import get_logger
from ..errors import describe
from .errors import cancelled_by_signal

logger = get_logger("nexusflow.interrupt")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
SETTLE_WITHIN = 10.0
"""Seconds that moving an interrupted run's states may take before it is given up with a warning."""
SETTLE_PASS = 1.0
"""Seconds between two passes over the interrupted run's task runs (``_cancelled``)."""
UNSETTLED = [StateType.CRASHED, StateType.RUNNING, StateType.PENDING, StateType.SCHEDULED]
"""The task-run states a cancellation leaves behind, moved to ``Cancelled`` (``SCHEDULED``: a
step waiting for its retry)."""
CANCELLED_ALREADY = (StateType.CANCELLED, StateType.CANCELLING, StateType.CRASHED)
"""The flow-run states that say the run was cancelled, whoever asked: given the pinned message."""


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
    relayed: bool = False
    """Caught by ``relayed``'s handler in the main thread: the main thread restores its handlers."""


@dataclass(frozen=True)
class _Target:
    """The run that a signal caught by ``relayed`` cancels, in its own loop and thread."""

    loop: asyncio.AbstractEventLoop
    task: asyncio.Task[Any]
    session_id: str
    flow_run_id: str


_caught: Interrupted | None = None
_installed = False
_relaying = False
_target: _Target | None = None
_armed: ContextVar[bool] = ContextVar("nexusflow_interrupt_armed", default=False)


def caught() -> Interrupted | None:
    return _caught


def cancelling() -> bool:
    """Whether the run this process runs is being cancelled: a signal caught here, or a
    Prefect runner's cancel intent (the run's status says ``cancelled``, not ``running``)."""
    return _caught is not None or cancel_intended()


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
        if text.startswith(CRASH_DETECTED):
            return False
        if text.startswith((FINISHED, 'tool "%s" was cancelled')):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_filter = _InterruptIsNoCrash()


def _default(number: int) -> None:
    """What the signal does without nexusflow (a second signal, or none of our runs to stop)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if number == signal.SIGINT:
        raise KeyboardInterrupt
    os.kill(os.getpid(), number)


def _interrupt(number: int, session_id: str, flow_run_id: str, sigint: Any, relayed: bool) -> None:
    """The signal ends the run ``Cancelled``: Prefect's cancel intent is set (unless a runner
    set its own), and the caller cancels the task that runs the flow."""
    global _caught
    owns = intent_unset()
    if owns:
        intend_cancel()
    _caught = Interrupted(number, session_id, flow_run_id, owns, sigint, relayed)


def _install_filters() -> None:
    add_filter(_filter, FLOW_RUNS, TASK_RUNS, "nexusflow.toolkit")


@contextmanager
def relayed() -> Iterator[None]:
    """``run_sync`` from the main thread: while it waits for the run in Prefect's loop thread,
    SIGINT and SIGTERM cancel the run there (``interruptible`` names it); with no run of ours
    in flight, or a second time, they do what they did before."""
    global _relaying
    from prefect.context import FlowRunContext

    if _relaying or threading.current_thread() is not threading.main_thread() or FlowRunContext.get() is not None:
        yield  # inside a synchronous flow, its engine answers signals
        return
    before: dict[int, Any] = {number: signal.getsignal(number) for number in SIGNALS}

    def handler(number: int, frame: FrameType | None) -> Any:
        target = _target
        if _caught is not None or target is None or target.task.done():
            _restore(before)  # what the signal did before, from now on
            previous = before[number]
            if callable(previous):
                return previous(number, frame)
            if previous != signal.SIG_IGN:
                os.kill(os.getpid(), number)
            return None
        _interrupt(number, target.session_id, target.flow_run_id, before[signal.SIGINT], relayed=True)
        target.loop.call_soon_threadsafe(target.task.cancel)

    _install_filters()
    for number in SIGNALS:
        signal.signal(number, handler)
    _relaying = True
    try:
        yield
    finally:
        _relaying = False
        _restore(before)


def in_deployment() -> bool:
    """Whether the current flow run is a deployment's, the outermost flow run of its process
    (``agent_job`` on a worker or under ``serve``), run in the main thread: its cancel is
    answered as an interrupt (``subflow=False`` runs are armed only there)."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    return (
        run is not None
        and run.deployment_id is not None
        and run.parent_task_run_id is None
        and threading.current_thread() is threading.main_thread()
    )


@asynccontextmanager
async def interruptible(session_id: str, flow_run_id: str) -> AsyncIterator[None]:
    """Answer SIGINT and SIGTERM by cancelling this run, for the body (a run ``armed`` by
    ``Client.run``, in the main thread, or in ``run_sync``'s loop thread while the main thread
    relays; elsewhere nothing changes)."""
    global _installed, _target
    task = asyncio.current_task()
    main = threading.current_thread() is threading.main_thread()
    if not _armed.get() or _installed or task is None or not (main or _relaying):
        yield
        return
    loop = asyncio.get_running_loop()
    if not main:  # the main thread's handler (``relayed``) cancels the task named here
        _install_filters()
        _installed, _target = True, _Target(loop, task, session_id, flow_run_id)
        try:
            yield
        finally:
            _installed, _target = False, None
        return
    before: dict[int, Any] = {number: signal.getsignal(number) for number in SIGNALS}

    def handler(number: int, frame: FrameType | None) -> Any:
        if _caught is not None or not installed or task.done():
            # A second signal, or a handler left behind (runs side by side restore each
            # other's handlers in any order): what the signal does without nexusflow.
            _default(number)
            return
        _interrupt(number, session_id, flow_run_id, before[signal.SIGINT], relayed=False)
        task.cancel()
        loop.call_soon_threadsafe(lambda: None)

    _install_filters()
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
        elif _caught.relayed is False and in_deployment():
            _restore(before)  # Prefect's SIGTERM bridge, for the rest of the engine's teardown


def _restore(handlers: dict[int, Any]) -> None:
    for number, handler in handlers.items():
        if handler is not None:  # None: a handler set outside Python, which cannot be set back
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
    await _mark_cancelled(interrupted)
    if interrupted.owns_intent:
        clear_intent()
    _caught = None
    if not interrupted.relayed:  # else the main thread restores its own, as ``run_sync`` returns
        signal.signal(signal.SIGINT, interrupted.sigint)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # Prefect's engine left it to us while the intent was set
    if interrupted.signal == signal.SIGINT:
        return KeyboardInterrupt()
    return SystemExit(128 + interrupted.signal)


async def _mark_cancelled(interrupted: Interrupted) -> None:
    """The interrupted run and its crashed task runs read ``Cancelled``, bounded and shielded:
    a failure is one warning line."""
    message = cancelled_by_signal(interrupted.session_id, signal.Signals(interrupted.signal).name)
    with anyio.CancelScope(shield=True):
        try:
            with anyio.fail_after(SETTLE_WITHIN):
                await _cancelled(UUID(interrupted.flow_run_id), message, interrupted.owns_intent)
        except Exception as exc:
            logger.warning("could not mark flow run %s Cancelled: %s", interrupted.flow_run_id, describe(exc))


async def settle_in_flow(raised: BaseException) -> BaseException:
    """A deployment's run (``in_deployment``) that a signal interrupted: its task runs that the
    cancellation crashed read ``Cancelled``, and so does the flow run, with the pinned
    message; the cancellation goes back to the flow engine, which ends the process (its
    runner, if it sent the signal, records the run once the process is gone). The catch stays
    set: the engine's closing lines of an interrupted run are INFO (``_InterruptIsNoCrash``)."""
    interrupted = _caught
    assert interrupted is not None
    await _mark_cancelled(interrupted)
    if interrupted.owns_intent:
        _pass_on_to_group(interrupted.signal)
    return raised


def _pass_on_to_group(number: int) -> None:
    """A signal that only this process got (a ``kill`` of the run's process, not its runner's
    cancel, which signals the process group) goes on to the rest of its group, as the runner's
    would: a program that a sync tool runs ends, so the tool's thread, which nothing else
    stops, returns and the process can exit (without it, the process and the program stayed
    for as long as the program ran). Only from the group's leader, as a runner starts a run's
    process; this process ignores its own copy."""
    group = os.getpgrp()
    if group != os.getpid():
        return
    before = signal.signal(number, signal.SIG_IGN)
    try:
        os.killpg(group, number)
    finally:
        signal.signal(number, before)


async def _cancelled(flow_run_id: UUID, message: str, owns_intent: bool) -> None:
    """The run's task runs that the cancellation went through, and the run, read ``Cancelled``.

    The flow run is marked after the first pass over its task runs, before any other: on a
    busy server the passes may outlast ``SETTLE_WITHIN``, and the run must not stay Running
    for it. It is cancelled here when this process set the cancel intent (a ``kill``, not its
    runner's cancel): Prefect's engine exits 0 when an intent is set, and its runner, which
    did not ask, would leave it Running. A task run's states reach the server as events, after
    the API's own writes: a crash the server records after the first pass (a tool's program
    that the signal ended first, a busy server) would stand, so the passes go on, a second
    apart, until one after the first finds nothing left to cancel."""
    async with get_client() as client:
        await _cancel_task_runs(client, flow_run_id, message)
        run = await client.read_flow_run(flow_run_id)
        state = run.state
        if state is None or state.type in CANCELLED_ALREADY or (owns_intent and not state.is_final()):
            await client.set_flow_run_state(flow_run_id, Cancelled(message=message), force=True)
        while True:
            await anyio.sleep(SETTLE_PASS)
            if not await _cancel_task_runs(client, flow_run_id, message):
                break


async def _cancel_task_runs(client: PrefectClient, flow_run_id: UUID, message: str) -> int:
    """One pass: the run's unsettled task runs read ``Cancelled``; how many there were."""
    left = await client.read_task_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
        task_run_filter=TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=UNSETTLED))),
    )
    for task_run in left:
        await client.set_task_run_state(task_run.id, Cancelled(message=message), force=True)
    return len(left)
