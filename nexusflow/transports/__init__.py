"""How one model turn is produced: in-process function, one-shot CLI, ACP session."""

from .base import ModelTransport, Remember, SessionTransport, TransportFactory
from .in_process import Generate, InProcessTransport, coerce_reply, in_process_transport

__all__ = [
    "Generate",
    "InProcessTransport",
    "ModelTransport",
    "Remember",
    "SessionTransport",
    "TransportFactory",
    "coerce_reply",
    "in_process_transport",
]
