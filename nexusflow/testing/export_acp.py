"""An ACP session's cassette, rebuilt from its stored steps (see ``export``).

Our client's side of the conversation is ours and deterministic: ``initialize``, the
``session/new`` with the served toolkit, the model chosen, and each turn's ``session/prompt``,
whose text comes from the turn's request as the transport builds it. The agent's side is
rebuilt from what the turns stored: the agent session's id, each tool call the agent made with
its stored result, the answer, and what the turn cost. The rebuilt agent advertises HTTP MCP
and ``session/resume``, asks no permission and says no thought: a replay runs the same turns,
calls the same tools and ends with the same result, and a resumed replay reopens the session.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .._support.secrets import MASK
from ..messages import AssistantMessage, Message, ModelReply, ModelRequest, ToolResult
from ..tasks import TurnRecord
from ..transports.acp.cassette import SERVER, URL, VERSION, walk
from ..transports.acp.handshake import PROTOCOL_VERSION, initialize_params
from ..transports.acp.turn import output_instruction, prompt_text
from ..transports.cassette import AcpEvent, AcpSession, Scrub, ToolUse

AGENT = "exported"
"""The agent's name in an exported session: no agent command was recorded."""
CAPABILITIES: dict[str, Any] = {
    "loadSession": True,
    "mcpCapabilities": {"http": True},
    "sessionCapabilities": {"resume": {}},
}
"""What the rebuilt agent advertises: our toolkit over HTTP, and a session a resumed run reopens."""
MODEL_META = "nexusflow/model"
"""Where a rebuilt ``usage_update`` names the model that answered (read as claude's adapter's is)."""


@dataclass(frozen=True)
class ExportedCall:
    """What the agent received for one of its tool calls: ``result`` in the run that finished
    the turn, and ``pending`` in the run the call's suspension ended, if it did."""

    result: ToolResult
    pending: ToolResult | None = None


@dataclass(frozen=True)
class ExportedTurn:
    """One stored turn, with what each tool call the agent made in it received, in order."""

    record: TurnRecord
    calls: list[ExportedCall]


class _Conversation:
    def __init__(self, agent_session: str, scrub: Scrub) -> None:
        self.session = agent_session
        self.scrub = scrub
        self.events: list[AcpEvent] = []
        self.ended_pending: list[list[AcpEvent]] = []
        """The conversations of the runs a suspended call ended, each up to its end."""
        self._next_id = 0

    def request(self, turn: int | None, method: str, params: dict[str, Any]) -> int:
        """Our client's request, as a replay matches it."""
        request_id = self._next_id
        self._next_id += 1
        message = walk({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, self.scrub.stable)
        self.events.append(AcpEvent(turn=turn, client=message))
        return request_id

    def answer(self, turn: int | None, request_id: int, result: dict[str, Any]) -> None:
        self.said(turn, {"jsonrpc": "2.0", "id": request_id, "result": result})

    def update(self, turn: int, update: dict[str, Any]) -> None:
        params = {"sessionId": self.session, "update": update}
        self.said(turn, {"jsonrpc": "2.0", "method": "session/update", "params": params})

    def said(self, turn: int | None, message: dict[str, Any]) -> None:
        self.events.append(AcpEvent(turn=turn, agent=walk(message, self.scrub.safe)))

    def use(self, name: str, arguments: dict[str, Any], result: ToolResult) -> ToolUse:
        return ToolUse(
            name=name, arguments=arguments, result=self.scrub.stable(result.content), is_error=result.is_error
        )

    def tool(self, turn: int, use: ToolUse) -> None:
        self.events.append(AcpEvent(turn=turn, tool=use))

    def pending(self, turn: int, use: ToolUse, asked: int) -> None:
        """The run that ended pending at this call: the conversation so far, the call told it
        is pending, our client cancelling the turn and the agent's answer that it stopped."""
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": self.session}}
        stopped = {"jsonrpc": "2.0", "id": asked, "result": {"stopReason": "cancelled"}}
        ending = [
            AcpEvent(turn=turn, tool=use),
            AcpEvent(turn=turn, client=walk(cancel, self.scrub.stable)),
            AcpEvent(turn=turn, agent=walk(stopped, self.scrub.safe)),
        ]
        self.ended_pending.append([*self.events, *ending])


def acp_sessions(
    style: str, agent_session: str, settings: dict[str, Any], turns: list[ExportedTurn], scrub: Scrub
) -> list[AcpSession]:
    """The conversation of ``turns`` in one agent session, uninterrupted; before it, for each
    call that suspended, the conversation of the run it ended pending (a replay of that run
    plays it, and the resumed run reopens the agent session and plays on in the last)."""
    talk = _Conversation(agent_session, scrub)
    params = initialize_params()
    asked = talk.request(None, "initialize", {**params, "clientInfo": {**params["clientInfo"], "version": VERSION}})
    talk.answer(None, asked, {"protocolVersion": PROTOCOL_VERSION, "agentCapabilities": CAPABILITIES})
    server = {
        "type": "http",
        "name": SERVER,
        "url": URL,
        "headers": [{"name": "Authorization", "value": f"Bearer {MASK}"}],
    }
    asked = talk.request(None, "session/new", {"cwd": "<acp-cwd>", "mcpServers": [server]})
    talk.answer(None, asked, {"sessionId": agent_session})
    model = settings.get("model")
    if isinstance(model, str):
        asked = talk.request(None, "session/set_model", {"sessionId": agent_session, "modelId": model})
        talk.answer(None, asked, {})
    messages: list[Message] = []
    cost = 0.0
    for step, turn in enumerate(turns):
        assert turn.record.asked is not None, "a turn without its request is refused before"
        messages += turn.record.asked.new
        request = ModelRequest.model_validate({**settings, "messages": messages})
        text = prompt_text(request.messages, whole=step == 0) + output_instruction(request)
        asked = talk.request(
            step, "session/prompt", {"sessionId": agent_session, "prompt": [{"type": "text", "text": text}]}
        )
        cost = _turn(talk, step, turn, asked, cost)
    return [AcpSession(style=style, agent=AGENT, events=events) for events in [*talk.ended_pending, talk.events]]


def _turn(talk: _Conversation, step: int, turn: ExportedTurn, asked: int, cost: float) -> float:
    """The agent's side of one turn: its tool calls, its answer, what it cost and how it
    stopped; the session's cumulative cost after it."""
    reply = turn.record.reply
    calls = [
        call for message in reply.steps if isinstance(message, AssistantMessage) for call in message.tool_calls or []
    ]
    for call, received in zip(calls, turn.calls, strict=True):
        arguments = walk(json.loads(call.arguments or "{}"), talk.scrub.safe)
        if received.pending is not None:
            talk.pending(step, talk.use(call.name, arguments, received.pending), asked)
        talk.tool(step, talk.use(call.name, arguments, received.result))
    if reply.content:
        talk.update(step, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": reply.content}})
    usage = reply.usage
    stated: dict[str, Any] = {}
    if usage is not None and usage.cost_usd is not None:
        cost += usage.cost_usd
        stated["cost"] = {"amount": cost, "currency": "USD"}
    if usage is not None and usage.model:
        stated["_meta"] = {MODEL_META: usage.model}
    if stated:
        talk.update(step, {"sessionUpdate": "usage_update", **stated})
    talk.answer(step, asked, _answer(reply))
    return cost


def _answer(reply: ModelReply) -> dict[str, Any]:
    """The ``session/prompt`` response: how the turn stopped and the tokens it stated."""
    answer: dict[str, Any] = {"stopReason": reply.stats.stop_reason or "end_turn"}
    usage = reply.usage
    if usage is not None:
        figures = {
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "cachedReadTokens": usage.cache_read_tokens,
            "cachedWriteTokens": usage.cache_write_tokens,
        }
        stated = {name: value for name, value in figures.items() if value is not None}
        if stated:
            answer["usage"] = stated
    return answer
