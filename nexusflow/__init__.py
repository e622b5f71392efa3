"""nexusflow: agent CLIs as tool-calling models, every agent run a Prefect flow."""

import warnings
from typing import TYPE_CHECKING, Any

from .client import Client, create_cli_client, create_in_process_client
from .errors import (
    AcpError,
    CliError,
    HookError,
    MaxTurnsExceeded,
    McpServerError,
    MissingVariableError,
    ModelError,
    NexusflowError,
    ResumeError,
    SessionIdError,
    ToolkitError,
)
from .events import RunFinished, StreamEvent, TextChunk, ThoughtChunk, ToolCallFinished, ToolCallStarted
from .flows import agent_run
from .memory import ConversationStore, LocalConversationStore
from .messages import (
    Answer,
    AssistantMessage,
    Message,
    ModelReply,
    ModelRequest,
    Request,
    RunMetrics,
    RunResult,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolSpec,
    TurnStats,
    Usage,
    UserMessage,
)
from .options import ClientOptions
from .policies import ToolPolicy, TransientError
from .suspension import Suspended, Suspension, current_answer, suspend
from .task_config import StepOptions, TaskConfig
from .tasks.keys import POSITIONAL_KEY, PositionalKey
from .toolkit import FunctionTool, Tool, Toolkit, tool
from .transports.choice import Transport
from .transports.cli import UNVERIFIED, AcpLaunch, CliStyle, CliStyles, load_cli_style
from .waits import AnswerForm, DeploymentSuspension, EventWait, Polling, PrefectPause, answer_flow_run

if TYPE_CHECKING:
    from .testing import ScriptedModel as ScriptedModel
    from .testing import follow_prompt as follow_prompt

__all__ = [
    "POSITIONAL_KEY",
    "UNVERIFIED",
    "AcpError",
    "AcpLaunch",
    "Answer",
    "AnswerForm",
    "AssistantMessage",
    "CliError",
    "CliStyle",
    "CliStyles",
    "Client",
    "ClientOptions",
    "ConversationStore",
    "DeploymentSuspension",
    "EventWait",
    "FunctionTool",
    "HookError",
    "LocalConversationStore",
    "MaxTurnsExceeded",
    "McpServerError",
    "Message",
    "MissingVariableError",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "NexusflowError",
    "Polling",
    "PositionalKey",
    "PrefectPause",
    "Request",
    "ResumeError",
    "RunFinished",
    "RunMetrics",
    "RunResult",
    "SessionIdError",
    "StepOptions",
    "StreamEvent",
    "Suspended",
    "Suspension",
    "SystemMessage",
    "TaskConfig",
    "TextChunk",
    "ThoughtChunk",
    "Tool",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolMessage",
    "ToolPolicy",
    "ToolResult",
    "ToolSpec",
    "Toolkit",
    "ToolkitError",
    "TransientError",
    "Transport",
    "TurnStats",
    "Usage",
    "UserMessage",
    "agent_run",
    "answer_flow_run",
    "create_cli_client",
    "create_in_process_client",
    "current_answer",
    "load_cli_style",
    "suspend",
    "tool",
]


_MOVED_TO_TESTING = frozenset({"ScriptedModel", "follow_prompt"})


def __getattr__(name: str) -> Any:
    """Test helpers moved to ``nexusflow.testing`` (so that importing nexusflow does not load
    them); the old names keep working, with a warning, for one release."""
    if name in _MOVED_TO_TESTING:
        warnings.warn(
            f"nexusflow.{name} is deprecated; import it from nexusflow.testing", DeprecationWarning, stacklevel=2
        )
        from . import testing

        return getattr(testing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
