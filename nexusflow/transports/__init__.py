"""How one model turn is produced: in-process function, one-shot CLI, ACP session."""

from .base import CallOutcome, CallTool, ModelTransport, Remember, SessionTransport, TransportFactory, TurnScope
from .in_process import Generate, InProcessTransport, coerce_reply, in_process_transport

__all__ = [
    "CallOutcome",
    "CallTool",
    "Generate",
    "InProcessTransport",
    "ModelTransport",
    "Remember",
    "SessionTransport",
    "TransportFactory",
    "TurnScope",
    "coerce_reply",
    "in_process_transport",
]
