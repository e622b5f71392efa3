"""The steps of one run as keyed Prefect tasks, and how a suspended call is settled."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from prefect.context import TaskRunContext
from prefect.filesystems import WritableFileSystem
from prefect.results import ResultStore
from prefect.utilities.annotations import quote

from .._support import tracing
from ..config.task_config import StepOptions, TaskConfig
from ..messages import Answer, ModelRequest, Request, ToolCall, ToolResult, Usage
from ..state.suspension import Suspended, outcome_text
from ..tasks import (
    ToolRecord,
    ToolRuntime,
    TurnRecord,
    TurnRuntime,
    chained_key,
    check_stored,
    forget,
    model_turn,
    suspension,
    tool_call,
    wait,
)
from ..tasks.live_run import LiveRun, bound
from ..tasks.tool_call import tool_attributes
from ..tasks.turn import chat_name, turn_attributes

StepKind = Literal["turn", "tool", "suspend", "wait"]


@dataclass(frozen=True)
class StepEntry:
    """One row of the run's step table (the summary artifact, ``nexusflow show``): every
    task run the run started, in the order it started (a turn's calls in call order, though
    they run at once)."""

    kind: StepKind
    name: str
    """The task run's name, as the Prefect UI shows it."""
    status: str
    """The task run's state name: Completed, Cached (a replay), ToolError, AwaitingAnswer, ..."""
    seconds: float
    replayed: bool
    usage: Usage | None = None
    """A turn's usage as reported (when it first ran, for a replayed turn)."""
    answered_by: str | None = None
    """The fallback client that answered the turn, when the run's own had spent its quota."""


class Steps:
    """The steps of one run as keyed Prefect tasks. Each key chains the key before it: a
    turn follows the previous turn and hashes only the messages that are new since then; a
    tool call, a suspension and a wait follow the turn that asked for them.

    Names are for people and keys for replay, so a name never enters a key: the n-th call
    of one tool in a turn is ``tool-{step}-{name}-{n}`` from n = 2 on (its suspension and
    wait carry the same suffix), and the call that runs again after an approval ends in
    ``-approved``. Every step adds its row to ``entries`` in the order it started."""

    def __init__(self, session_id: str, storage: WritableFileSystem, tools: ToolRuntime, config: TaskConfig) -> None:
        self.session_id = session_id
        self.storage = storage
        self.config = config
        self.tools = tools
        self.upstream = ""
        self.known = 0
        self.turn_key = ""
        self._rows: list[tuple[int, StepEntry]] = []
        self._started = itertools.count()
        self._labels: dict[tuple[int, int, str], str] = {}
        self._repeats: Counter[tuple[int, str]] = Counter()
        self._configured: dict[Any, Any] = {}

    def configured(self, task: Any, options: StepOptions) -> Any:
        """The task with its kind's options, made once per run, not once per step."""
        if task not in self._configured:
            self._configured[task] = task.with_options(**options.task_options(self.storage))
        return self._configured[task]

    def label(self, step: int, index: int, call: ToolCall) -> str:
        """The call's tool name, with ``-2``, ``-3``... for later calls of the same tool in
        the turn. A turn's calls are labelled in call order as soon as the turn returns (they
        then run concurrently); an ACP agent's calls in the order they arrive."""
        identity = (step, index, call.id)
        if identity not in self._labels:
            self._repeats[step, call.name] += 1
            repeat = self._repeats[step, call.name]
            self._labels[identity] = call.name if repeat == 1 else f"{call.name}-{repeat}"
        return self._labels[identity]

    @property
    def entries(self) -> list[StepEntry]:
        return [entry for _, entry in sorted(self._rows, key=lambda row: row[0])]

    def _record(
        self,
        order: int,
        kind: StepKind,
        name: str,
        status: str | None,
        seconds: float,
        usage: Usage | None = None,
        answered_by: str | None = None,
    ) -> bool:
        """Add the step's row, at the place its start took; whether it was replayed."""
        replayed = status == "Cached"
        entry = StepEntry(kind, name, status or "Completed", 0.0 if replayed else seconds, replayed, usage, answered_by)
        self._rows.append((order, entry))
        return replayed

    async def turn(self, step: int, request: ModelRequest, model: TurnRuntime) -> tuple[TurnRecord, bool]:
        """The turn's task, given the live objects it asks the model through (``model``)."""
        order = next(self._started)
        new = [message.model_dump(mode="json", exclude_none=True) for message in request.messages[self.known :]]
        settings = request.model_dump(mode="json", exclude={"messages"}) if not self.upstream else None
        key = chained_key(self.session_id, step, "turn", 0, self.upstream, {"new": new, "settings": settings})
        forget(key)
        self.turn_key = key  # calls an ACP agent makes during the turn follow it
        task = self.configured(model_turn, self.config.turn)
        state = await task(self.session_id, step, key, quote(request), quote(model), self.known, return_state=True)
        record = TurnRecord.model_validate(await state.aresult())
        replayed = self._record(
            order, "turn", f"turn-{step}", state.name, record.seconds, record.reply.usage, record.answered_by
        )
        check_stored(f"turn-{step}", key, replayed)
        if replayed:
            tracing.replayed(chat_name(request), turn_attributes(self.session_id, step, request))
        for index, call in enumerate(record.reply.tool_calls):
            self.label(step, index, call)
        self.upstream = key
        self.known = len(request.messages)
        return record, replayed

    def tool_key(self, step: int, index: int, call: ToolCall, answer: Answer | None) -> str:
        inputs = {"call": call.model_dump(), "answer": answer.model_dump(mode="json") if answer else None}
        return chained_key(self.session_id, step, "tool", index, self.turn_key, inputs)

    async def tool(
        self, step: int, index: int, call: ToolCall, answer: Answer | None = None
    ) -> tuple[ToolRecord, bool]:
        order = next(self._started)
        key = self.tool_key(step, index, call, answer)
        forget(key)
        name = f"tool-{step}-{self.label(step, index, call)}" + ("-approved" if answer is not None else "")
        task = self.configured(tool_call, self.config.tool)
        state = await task(
            self.session_id, step, index, key, name, quote(call), quote(self.tools), answer, return_state=True
        )
        record = ToolRecord.model_validate(await state.aresult())
        replayed = self._record(order, "tool", name, state.name, record.seconds, record.result.usage)
        check_stored(name, key, replayed)
        if replayed:
            tracing.replayed(f"execute_tool {call.name}", tool_attributes(self.session_id, step, call))
        return record, replayed

    def asked_key(self, kind: str, step: int, index: int, request: Request) -> str:
        return chained_key(self.session_id, step, kind, index, self.turn_key, request.model_dump(mode="json"))

    async def suspension(self, step: int, index: int, label: str, request: Request) -> None:
        order = next(self._started)
        key = self.asked_key("suspend", step, index, request)
        forget(key)
        name = f"suspend-{step}-{label}"
        task = self.configured(suspension, self.config.wait)
        state = await task(self.session_id, step, index, key, name, request, return_state=True)
        await state.aresult()
        check_stored(name, key, self._record(order, "suspend", name, state.name, 0.0))

    async def answered(self, step: int, index: int, request: Request) -> bool:
        """Whether this wait was answered in an earlier run (its record is stored)."""
        return await ResultStore(result_storage=self.storage).aexists(self.asked_key("wait", step, index, request))

    async def wait(
        self, step: int, index: int, label: str, request: Request, resolve: Callable[[Request], Awaitable[Answer]]
    ) -> Answer:
        """Its seconds are how long the answer took to come."""
        order = next(self._started)
        key = self.asked_key("wait", step, index, request)
        forget(key)
        name = f"wait-{step}-{label}"
        task = self.configured(wait, self.config.wait)
        started = time.perf_counter()
        state = await task(self.session_id, step, index, key, name, request, quote(resolve), return_state=True)
        answer = Answer.model_validate(await state.aresult())
        check_stored(name, key, self._record(order, "wait", name, state.name, time.perf_counter() - started))
        return answer


def asked(session_id: str, step: int, index: int, call: ToolCall, record: ToolRecord) -> Request:
    """The request a suspended call makes, named by its position: ``<session>.<turn>.<index>``."""
    assert record.result.pending is not None
    return record.result.pending.model_copy(
        update={"id": f"{session_id}.{step}.{index}", "tool": call.name, "arguments": call.arguments}
    )


async def settle(
    live: LiveRun,
    steps: Steps,
    step: int,
    index: int,
    call: ToolCall,
    record: ToolRecord,
    run_again: Callable[[int, int, ToolCall, Answer], Awaitable[tuple[ToolRecord, bool]]],
) -> ToolRecord:
    """Ask about a suspended call (or find the answer already given), then run it once more
    with the answer, or tell the model it was declined, expired or left unresolved.
    ``run_again`` runs the approved call (``Steps.tool`` with the answer) the way the flow
    runs every call, so a live failure of it is reported like any other."""
    request = asked(steps.session_id, step, index, call, record)
    label = steps.label(step, index, call)
    await steps.suspension(step, index, label, request)
    answer = await _answer(live, steps, step, index, label, request)
    if answer.ok:
        again, _ = await run_again(step, index, call, answer)
        result = again.result if again.result.pending is None else ToolResult(content=outcome_text(request, None))
        seconds = record.seconds + again.seconds
    else:
        result, seconds = ToolResult(content=outcome_text(request, answer)), record.seconds
    return ToolRecord(result=result, seconds=seconds, suspended=True)


async def _answer(live: LiveRun, steps: Steps, step: int, index: int, label: str, request: Request) -> Answer:
    given = live.answers.get(bound(request))
    wait_for = live.options.wait_for
    resolve: Callable[[Request], Awaitable[Answer]]
    if given is not None:
        resolve = _constant(given)
    elif wait_for is not None and getattr(wait_for, "in_flow", False) and TaskRunContext.get() is None:
        resolve = _constant(await wait_for(request))
    elif wait_for is not None and not getattr(wait_for, "in_flow", False):
        resolve = wait_for
    elif await steps.answered(step, index, request):
        resolve = _constant(Answer(id=request.id, ok=False, reason="unreachable: the stored answer replays"))
    else:
        raise Suspended(request)
    return await steps.wait(step, index, label, request, resolve)


def _constant(answer: Answer) -> Callable[[Request], Awaitable[Answer]]:
    async def resolve(request: Request) -> Answer:
        return answer

    return resolve
