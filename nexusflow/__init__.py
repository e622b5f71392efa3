"""nexusflow: agent CLIs as tool-calling models, every agent run a Prefect flow."""

import sys
import warnings
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._server import choose_server
    from .alerts import (
        Alert,
        install_alerts,
        install_alerts_sync,
        list_alerts,
        list_alerts_sync,
        remove_alerts,
        remove_alerts_sync,
    )
    from .cli_client import create_cli_client
    from .client import Client, create_in_process_client
    from .compose import AgentTool
    from .errors import (
        AcpError,
        AlertsError,
        AuthRequired,
        BudgetExceeded,
        CassetteError,
        CassetteExportError,
        CassetteMismatch,
        CliError,
        HookError,
        MaxTurnsExceeded,
        McpServerError,
        MissingVariableError,
        ModelError,
        NexusflowError,
        OutputError,
        QuotaExhausted,
        ResumeError,
        SessionIdError,
        SessionLiveError,
        SubscriptionLimitError,
        ToolkitError,
        TransientError,
    )
    from .events import RunFinished, StreamEvent, TextChunk, ThoughtChunk, ToolCallFinished, ToolCallStarted
    from .flows import agent_run
    from .memory import ConversationStore, LocalConversationStore, StorageConversationStore
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
    from .policies import ToolPolicy
    from .sessions import (
        Forgotten,
        SessionInfo,
        forget_session,
        forget_session_sync,
        list_sessions,
        list_sessions_sync,
        prune_sessions,
        prune_sessions_sync,
    )
    from .subscription import SubscriptionLimit
    from .suspension import Suspended, Suspension, current_answer, suspend
    from .task_config import StepOptions, TaskConfig
    from .tasks.keys import POSITIONAL_KEY, PositionalKey
    from .testing import ScriptedModel as ScriptedModel
    from .testing import follow_prompt as follow_prompt
    from .toolkit import FunctionTool, Tool, Toolkit, tool
    from .transports.choice import Transport
    from .transports.oneshot import UNVERIFIED, AcpLaunch, CliStyle, CliStyles, load_cli_style
    from .waits import AnswerForm, DeploymentSuspension, EventWait, Polling, PrefectPause, answer_flow_run

_WHERE: dict[str, str] = {
    "Alert": "alerts",
    "AlertsError": "errors",
    "install_alerts": "alerts",
    "install_alerts_sync": "alerts",
    "list_alerts": "alerts",
    "list_alerts_sync": "alerts",
    "remove_alerts": "alerts",
    "remove_alerts_sync": "alerts",
    "SessionInfo": "sessions",
    "Forgotten": "sessions",
    "list_sessions": "sessions",
    "forget_session": "sessions",
    "prune_sessions": "sessions",
    "list_sessions_sync": "sessions",
    "forget_session_sync": "sessions",
    "prune_sessions_sync": "sessions",
    "SessionLiveError": "errors",
    "AcpError": "errors",
    "AcpLaunch": "transports.oneshot",
    "AgentTool": "compose",
    "Answer": "messages",
    "AnswerForm": "waits",
    "AssistantMessage": "messages",
    "CassetteError": "errors",
    "CassetteExportError": "errors",
    "CassetteMismatch": "errors",
    "CliError": "errors",
    "CliStyle": "transports.oneshot",
    "CliStyles": "transports.oneshot",
    "Client": "client",
    "ClientOptions": "options",
    "ConversationStore": "memory",
    "DeploymentSuspension": "waits",
    "EventWait": "waits",
    "FunctionTool": "toolkit",
    "HookError": "errors",
    "LocalConversationStore": "memory",
    "StorageConversationStore": "memory",
    "MaxTurnsExceeded": "errors",
    "BudgetExceeded": "errors",
    "QuotaExhausted": "errors",
    "AuthRequired": "errors",
    "McpServerError": "errors",
    "Message": "messages",
    "MissingVariableError": "errors",
    "ModelError": "errors",
    "ModelReply": "messages",
    "ModelRequest": "messages",
    "NexusflowError": "errors",
    "OutputError": "errors",
    "POSITIONAL_KEY": "tasks.keys",
    "Polling": "waits",
    "PositionalKey": "tasks.keys",
    "PrefectPause": "waits",
    "Request": "messages",
    "ResumeError": "errors",
    "RunFinished": "events",
    "RunMetrics": "messages",
    "RunResult": "messages",
    "SessionIdError": "errors",
    "StepOptions": "task_config",
    "StreamEvent": "events",
    "SubscriptionLimit": "subscription",
    "SubscriptionLimitError": "errors",
    "Suspended": "suspension",
    "Suspension": "suspension",
    "SystemMessage": "messages",
    "TaskConfig": "task_config",
    "TextChunk": "events",
    "ThoughtChunk": "events",
    "Tool": "toolkit",
    "ToolCall": "messages",
    "ToolCallFinished": "events",
    "ToolCallStarted": "events",
    "ToolMessage": "messages",
    "ToolPolicy": "policies",
    "ToolResult": "messages",
    "ToolSpec": "messages",
    "Toolkit": "toolkit",
    "ToolkitError": "errors",
    "TransientError": "errors",
    "Transport": "transports.choice",
    "TurnStats": "messages",
    "UNVERIFIED": "transports.oneshot",
    "Usage": "messages",
    "UserMessage": "messages",
    "agent_run": "flows",
    "answer_flow_run": "waits",
    "choose_server": "_server",
    "create_cli_client": "cli_client",
    "create_in_process_client": "client",
    "current_answer": "suspension",
    "load_cli_style": "transports.oneshot",
    "suspend": "suspension",
    "tool": "toolkit",
}
"""Where each public name lives: loaded on first use, so that importing nexusflow (and
`nexusflow --help`) does not import Prefect."""


__all__ = [
    "POSITIONAL_KEY",
    "UNVERIFIED",
    "AcpError",
    "AcpLaunch",
    "AgentTool",
    "Alert",
    "AlertsError",
    "Answer",
    "AnswerForm",
    "AssistantMessage",
    "AuthRequired",
    "BudgetExceeded",
    "CassetteError",
    "CassetteExportError",
    "CassetteMismatch",
    "CliError",
    "CliStyle",
    "CliStyles",
    "Client",
    "ClientOptions",
    "ConversationStore",
    "DeploymentSuspension",
    "EventWait",
    "Forgotten",
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
    "OutputError",
    "Polling",
    "PositionalKey",
    "PrefectPause",
    "QuotaExhausted",
    "Request",
    "ResumeError",
    "RunFinished",
    "RunMetrics",
    "RunResult",
    "SessionIdError",
    "SessionInfo",
    "SessionLiveError",
    "StepOptions",
    "StorageConversationStore",
    "StreamEvent",
    "SubscriptionLimit",
    "SubscriptionLimitError",
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
    "choose_server",
    "create_cli_client",
    "create_in_process_client",
    "current_answer",
    "forget_session",
    "forget_session_sync",
    "install_alerts",
    "install_alerts_sync",
    "list_alerts",
    "list_alerts_sync",
    "list_sessions",
    "list_sessions_sync",
    "load_cli_style",
    "prune_sessions",
    "prune_sessions_sync",
    "remove_alerts",
    "remove_alerts_sync",
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
    if name in _WHERE:
        value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _FlowsJob(ModuleType):
    """``nexusflow.flows.job``, the deployments' entry point the README of 0.1 named: a
    ``prefect.yaml`` that still says ``nexusflow.flows.job:agent_job`` keeps working, with a
    warning. It lives here, in the package that sits above the job, so that ``flows`` never
    points up at it; Python finds it in ``sys.modules`` before it looks for a file."""

    def __getattr__(self, name: str) -> Any:
        if name != "agent_job":
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        warnings.warn(
            "nexusflow.flows.job:agent_job is deprecated: use nexusflow.job:agent_job", DeprecationWarning, stacklevel=2
        )
        return import_module(".job", __name__).agent_job


sys.modules.setdefault(f"{__name__}.flows.job", _FlowsJob(f"{__name__}.flows.job"))
