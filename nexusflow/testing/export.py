"""A finished run becomes a test: a session's recorded steps written as a cassette, so a run
that went wrong in production replays in a test, offline, the same way. No binary is needed
and nothing runs live: the cassette comes from the result storage alone.

What the records hold decides what the cassette holds. A turn's record keeps the reply as
the envelope parsed it (content, tool calls, usage) and what its request added to the turn
before it (``TurnAsked``), so every turn's request is rebuilt exactly. The CLI's own output
is never stored, nor the client's style, argv or envelope instructions: an exported launch
therefore carries the reply instead of an answer, is replayed above the process and the
envelope, and is matched by its request alone, normalised as a recorded launch is and
failing with the same diff when the code under test asks something else. The tools are not
in the cassette: on replay they really run, and a tool whose result changed shows up at the
turn that reads it.

An ACP session (one whose run kept its agent session's id) is exported as an ACP session
instead, rebuilt by ``export_acp``: a client on the ACP transport replays it as it would a
recorded one, its tools running for real through the served MCP server.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect.filesystems import WritableFileSystem
from prefect.utilities.asyncutils import run_coro_as_sync
from pydantic import RootModel

from .._prefect.storage import read_step, step_storage, steps_prefix
from .._prefect.storage_tree import children, files
from ..config._checks import check_session_id
from ..flows.steps import asked
from ..messages import Answer, AssistantMessage, Message, ModelRequest, ToolCall, ToolMessage, ToolResult, UserMessage
from ..ops.sessions import session_info
from ..state.store import SessionStore, read_inputs
from ..tasks import TurnRecord, chained_key
from ..tasks.keys import step_key
from ..tasks.tool_call import ToolRecord
from ..transports.acp.turn import pending_result
from ..transports.cassette import CassetteFile, Scrub, default_places, exported, schema, secret_values
from ..transports.oneshot.style import CliStyles
from .errors import (
    export_acp_answered_by,
    export_acp_steps,
    export_acp_style,
    export_acp_tool_unstored,
    export_ambiguous,
    export_hooked,
    export_no_request,
    export_no_session,
    export_no_turns,
    export_running,
)
from .export_acp import ExportedCall, ExportedTurn, acp_sessions

_RECORD = re.compile(r"0-[0-9a-f]+")
"""A turn's record: ``<call>-<digest>``, and a turn is call 0 (see ``tasks.keys``)."""


async def export_cassette(
    session_id: str,
    path: str | os.PathLike[str],
    *,
    places: Mapping[str, str | os.PathLike[str]] | None = None,
    style: str | None = None,
) -> CassetteFile:
    """Write the cassette of a session that is not running (completed, failed, waiting or
    crashed: each turn it finished) to ``path``, and return it. Replay it with a CLI client
    and ``Cassette(path)``: a one-shot session's turns as exported launches, an ACP session
    as an ACP session (replayed by a client on the ACP transport). ``style``: the name of the
    ACP client's style when it is none of the built-in ones (its session is found by it).
    Secrets are masked as in a recording: the values nexusflow registered and those of this
    process's environment whose names say they are secret; ``places`` names folders that
    differ between machines, beside the working directory and the home folder. Refused with
    a ``CassetteExportError``: no such session, a running one, records without what a
    cassette needs."""
    check_session_id(session_id, "export_cassette")
    info = await session_info(session_id)
    if info is None:
        raise export_no_session(session_id)
    if info.state == "running":
        raise export_running(session_id, info.flow_run_id)
    storage = await step_storage()
    chain = await _turns(storage, session_id)
    if not chain:
        raise export_no_turns(session_id)
    turns = [record for _, record in chain]
    for step, record in enumerate(turns):
        if record.hooked:
            raise export_hooked(session_id, step, record.hooked[0])
    named = default_places() | {name: os.fspath(value) for name, value in (places or {}).items()}
    scrub = Scrub(named, secret_values(dict(os.environ)))
    settings = (turns[0].asked.settings if turns[0].asked is not None else None) or {}
    acp = await _acp_style(storage, session_id, style)
    if acp is not None:
        agent_session = await read_step(_Text, acp[1], storage)
        assert agent_session is not None, "listed, so stored"
        exported_turns = [
            await _acp_turn(storage, session_id, step, key, record) for step, (key, record) in enumerate(chain)
        ]
        sessions = acp_sessions(acp[0], agent_session.root, settings, exported_turns, scrub)
        cassette = CassetteFile(version=schema.VERSION, acp=sessions)
    else:
        messages: list[Message] = []
        launches = []
        for step, record in enumerate(turns):
            assert record.asked is not None, "a turn without its request is refused in _turns"
            if record.reply.steps:
                raise export_acp_steps(session_id, step)
            messages += record.asked.new
            body = ModelRequest.model_validate({**settings, "messages": messages}).body()
            launches.append(exported(step, body, record.reply, record.seconds, scrub))
        cassette = CassetteFile(version=schema.VERSION, launches=launches)
    cassette = cassette.model_copy(update={"version": cassette.lowest_version})
    schema.write(Path(path), schema.text(cassette))
    return cassette


def export_cassette_sync(
    session_id: str,
    path: str | os.PathLike[str],
    *,
    places: Mapping[str, str | os.PathLike[str]] | None = None,
    style: str | None = None,
) -> CassetteFile:
    """``export_cassette`` for synchronous code."""
    return run_coro_as_sync(export_cassette(session_id, path, places=places, style=style))


class _Text(RootModel[str]):
    """A stored string (the agent session's id an ACP run remembered)."""


async def _acp_style(storage: WritableFileSystem, session_id: str, style: str | None) -> tuple[str, str] | None:
    """The style of the ACP client whose agent session the session's run remembered, and
    that record's key; None for a session that never opened one (a one-shot session). The
    record's key hashes the style's name, so a style is found by trying the names: the
    built-in ones, or ``style``."""
    folder = f"{steps_prefix(session_id)}/0/acp-session"
    stored = set(await files(storage, folder))
    if not stored:
        return None
    names = [style] if style is not None else [builtin.value for builtin in CliStyles]
    keys = {name: step_key(session_id, 0, "acp-session", 0, {"style": name}) for name in names}
    found = [(name, key) for name, key in keys.items() if key.rsplit("/", 1)[1] in stored]
    if len(found) != 1:
        raise export_acp_style(session_id, style, len(found))
    return found[0]


async def _acp_turn(
    storage: WritableFileSystem, session_id: str, step: int, key: str, record: TurnRecord
) -> ExportedTurn:
    """A turn of an ACP session, with what each tool call the agent made in it received. A
    call is keyed by the turn's key, the call, and how many equal calls came before it in the
    turn (as the transport numbers them); one that suspended, by its answer too, and the
    answer by the request."""
    if record.answered_by is not None:
        raise export_acp_answered_by(session_id, step, record.answered_by)
    received = {message.tool_call_id: message for message in record.reply.steps if isinstance(message, ToolMessage)}
    made = [
        call
        for message in record.reply.steps
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls or []
    ]
    calls: list[ExportedCall] = []
    for position, call in enumerate(made):
        index = sum(
            1
            for other in made[:position]
            if (other.name, other.parsed_arguments()) == (call.name, call.parsed_arguments())
        )
        stored = await read_step(ToolRecord, _tool_key(session_id, step, index, key, call, None), storage)
        if stored is None or call.id not in received:
            raise export_acp_tool_unstored(session_id, step, call.name)
        if stored.result.pending is None:
            calls.append(ExportedCall(result=stored.result))
            continue
        request = asked(session_id, step, index, call, stored)
        wait = chained_key(session_id, step, "wait", index, key, request.model_dump(mode="json"))
        answer = await read_step(Answer, wait, storage)
        if answer is None:
            raise export_acp_tool_unstored(session_id, step, call.name)
        again = (
            await read_step(ToolRecord, _tool_key(session_id, step, index, key, call, answer), storage)
            if answer.ok
            else None
        )
        failed = again is not None and again.result.pending is None and again.result.is_error
        result = ToolResult(content=received[call.id].content, is_error=failed)
        calls.append(ExportedCall(result=result, pending=pending_result(request.prompt)))
    return ExportedTurn(record=record, calls=calls)


def _tool_key(session_id: str, step: int, index: int, turn: str, call: ToolCall, answer: Answer | None) -> str:
    """As ``Steps.tool_key`` keys a call the flow ran in the turn keyed ``turn``."""
    inputs = {"call": call.model_dump(), "answer": answer.model_dump(mode="json") if answer else None}
    return chained_key(session_id, step, "tool", index, turn, inputs)


async def _turns(storage: WritableFileSystem, session_id: str) -> list[tuple[str, TurnRecord]]:
    """The session's turns, in order, as its runs chained them. Each turn's key chains the
    key of the turn before it, and a record's own ``asked`` gives back the rest of its key:
    a session run again with another prompt keeps the first run's records beside the new
    ones, and only the records that link up are one run's; of several first turns, the one
    that asked the session's latest prompt."""
    prefix = steps_prefix(session_id)
    numbered = {int(name) for name in await children(storage, prefix) if name.isdigit()}
    chain: list[tuple[str, TurnRecord]] = []
    upstream = ""
    while len(chain) in numbered:
        step = len(chain)
        linked: list[tuple[str, TurnRecord]] = []
        lacking = False
        for name in await files(storage, f"{prefix}/{step}/turn"):
            if not _RECORD.fullmatch(name):
                continue  # not a turn's record (a lock, say)
            key = f"{prefix}/{step}/turn/{name}"
            record = await read_step(TurnRecord, key, storage)
            if record is None:
                continue
            if record.asked is None or (step == 0 and record.asked.settings is None):
                lacking = True
                continue
            inputs = {
                "new": [message.model_dump(mode="json", exclude_none=True) for message in record.asked.new],
                "settings": record.asked.settings,
            }
            if chained_key(session_id, step, "turn", 0, upstream, inputs) == key:
                linked.append((key, record))
        if not linked and lacking:
            raise export_no_request(session_id, step)
        if not linked:
            break
        if len(linked) > 1 and step == 0:
            linked = await _latest(session_id, linked)
        if len(linked) > 1:
            raise export_ambiguous(session_id, step)
        upstream, record = linked[0]
        chain.append((upstream, record))
    return chain


async def _latest(session_id: str, linked: list[tuple[str, TurnRecord]]) -> list[tuple[str, TurnRecord]]:
    """Of several first turns, those that asked the prompt (and history) of the session's
    latest run, as ``Client.run`` stored them."""
    state = await SessionStore().get(session_id)
    inputs = await read_inputs(session_id, state.inputs) if state is not None else None
    if inputs is None:
        return linked
    history = [message for message in inputs.history if message.role != "system"]
    opening = [_said(message) for message in [*history, UserMessage(content=inputs.prompt)]]
    return [
        (key, record)
        for key, record in linked
        if record.asked is not None and [_said(m) for m in record.asked.new if m.role != "system"] == opening
    ]


def _said(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json", exclude_none=True)
