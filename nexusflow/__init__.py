"""nexusflow: agent CLIs as tool-calling models, every agent run a Prefect flow."""

from .client import Client, ClientOptions, create_in_process_client
from .errors import (
    HookError,
    MaxTurnsExceeded,
    McpServerError,
    MissingVariableError,
    ModelError,
    NexusflowError,
    SessionIdError,
    ToolkitError,
)
from .flows import agent_run
from .messages import (
    AssistantMessage,
    Message,
    ModelReply,
    ModelRequest,
    RunMetrics,
    RunResult,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)
from .testing import ScriptedModel, follow_prompt
from .toolkit import FunctionTool, Tool, Toolkit, tool

__all__ = [
    "AssistantMessage",
    "Client",
    "ClientOptions",
    "FunctionTool",
    "HookError",
    "MaxTurnsExceeded",
    "McpServerError",
    "Message",
    "MissingVariableError",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "NexusflowError",
    "RunMetrics",
    "RunResult",
    "ScriptedModel",
    "SessionIdError",
    "SystemMessage",
    "Tool",
    "ToolCall",
    "ToolMessage",
    "ToolResult",
    "ToolSpec",
    "Toolkit",
    "ToolkitError",
    "Usage",
    "UserMessage",
    "agent_run",
    "create_in_process_client",
    "follow_prompt",
    "tool",
]
