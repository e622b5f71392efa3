"""nexusflow: agent CLIs as tool-calling models, every agent run a Prefect flow."""

import sys
import warnings
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

# What a type checker sees of the names loaded on first use below: `X as X` exports each
# one to a strict checker; tests/offline/test_package.py keeps them to _PUBLIC.
if TYPE_CHECKING:
    from ._prefect.server import choose_server as choose_server
    from .cli_client import create_cli_client as create_cli_client
    from .client import Client as Client
    from .client import create_in_process_client as create_in_process_client
    from .compose import AgentTool as AgentTool
    from .config.options import ClientOptions as ClientOptions
    from .config.policies import ToolPolicy as ToolPolicy
    from .config.subscription import SubscriptionLimit as SubscriptionLimit
    from .config.task_config import StepOptions as StepOptions
    from .config.task_config import TaskConfig as TaskConfig
    from .config.waits import AnswerForm as AnswerForm
    from .config.waits import DeploymentSuspension as DeploymentSuspension
    from .config.waits import EventWait as EventWait
    from .config.waits import Polling as Polling
    from .config.waits import PrefectPause as PrefectPause
    from .config.waits import answer_flow_run as answer_flow_run
    from .errors import AcpError as AcpError
    from .errors import AlertsError as AlertsError
    from .errors import AuthRequired as AuthRequired
    from .errors import BudgetExceeded as BudgetExceeded
    from .errors import CassetteError as CassetteError
    from .errors import CassetteExportError as CassetteExportError
    from .errors import CassetteMismatch as CassetteMismatch
    from .errors import CliError as CliError
    from .errors import HookError as HookError
    from .errors import MaxTurnsExceeded as MaxTurnsExceeded
    from .errors import McpServerError as McpServerError
    from .errors import MissingVariableError as MissingVariableError
    from .errors import ModelError as ModelError
    from .errors import NexusflowError as NexusflowError
    from .errors import OutputError as OutputError
    from .errors import QuotaExhausted as QuotaExhausted
    from .errors import ResumeError as ResumeError
    from .errors import SessionIdError as SessionIdError
    from .errors import SessionLiveError as SessionLiveError
    from .errors import SubscriptionLimitError as SubscriptionLimitError
    from .errors import ToolkitError as ToolkitError
    from .errors import TransientError as TransientError
    from .flows import agent_run as agent_run
    from .messages import Answer as Answer
    from .messages import AssistantMessage as AssistantMessage
    from .messages import Message as Message
    from .messages import ModelReply as ModelReply
    from .messages import ModelRequest as ModelRequest
    from .messages import Request as Request
    from .messages import RunMetrics as RunMetrics
    from .messages import RunResult as RunResult
    from .messages import SystemMessage as SystemMessage
    from .messages import ToolCall as ToolCall
    from .messages import ToolMessage as ToolMessage
    from .messages import ToolResult as ToolResult
    from .messages import ToolSpec as ToolSpec
    from .messages import TurnStats as TurnStats
    from .messages import Usage as Usage
    from .messages import UserMessage as UserMessage
    from .ops.alerts import Alert as Alert
    from .ops.alerts import install_alerts as install_alerts
    from .ops.alerts import install_alerts_sync as install_alerts_sync
    from .ops.alerts import list_alerts as list_alerts
    from .ops.alerts import list_alerts_sync as list_alerts_sync
    from .ops.alerts import remove_alerts as remove_alerts
    from .ops.alerts import remove_alerts_sync as remove_alerts_sync
    from .ops.sessions import Forgotten as Forgotten
    from .ops.sessions import SessionInfo as SessionInfo
    from .ops.sessions import forget_session as forget_session
    from .ops.sessions import forget_session_sync as forget_session_sync
    from .ops.sessions import list_sessions as list_sessions
    from .ops.sessions import list_sessions_sync as list_sessions_sync
    from .ops.sessions import prune_sessions as prune_sessions
    from .ops.sessions import prune_sessions_sync as prune_sessions_sync
    from .state.events import RunFinished as RunFinished
    from .state.events import StreamEvent as StreamEvent
    from .state.events import TextChunk as TextChunk
    from .state.events import ThoughtChunk as ThoughtChunk
    from .state.events import ToolCallFinished as ToolCallFinished
    from .state.events import ToolCallStarted as ToolCallStarted
    from .state.store import ConversationStore as ConversationStore
    from .state.store import LocalConversationStore as LocalConversationStore
    from .state.store import StorageConversationStore as StorageConversationStore
    from .state.suspension import Suspended as Suspended
    from .state.suspension import Suspension as Suspension
    from .state.suspension import current_answer as current_answer
    from .state.suspension import suspend as suspend
    from .tasks.keys import POSITIONAL_KEY as POSITIONAL_KEY
    from .tasks.keys import PositionalKey as PositionalKey
    from .testing import ScriptedModel as ScriptedModel
    from .testing import follow_prompt as follow_prompt
    from .toolkit import FunctionTool as FunctionTool
    from .toolkit import Tool as Tool
    from .toolkit import Toolkit as Toolkit
    from .toolkit import tool as tool
    from .transports.choice import Transport as Transport
    from .transports.oneshot import UNVERIFIED as UNVERIFIED
    from .transports.oneshot import AcpLaunch as AcpLaunch
    from .transports.oneshot import CliStyle as CliStyle
    from .transports.oneshot import CliStyles as CliStyles
    from .transports.oneshot import load_cli_style as load_cli_style

_PUBLIC: dict[str, tuple[str, ...]] = {
    "_prefect.server": ("choose_server",),
    "cli_client": ("create_cli_client",),
    "client": ("Client", "create_in_process_client"),
    "compose": ("AgentTool",),
    "config.options": ("ClientOptions",),
    "config.policies": ("ToolPolicy",),
    "config.subscription": ("SubscriptionLimit",),
    "config.task_config": ("StepOptions", "TaskConfig"),
    "config.waits": ("AnswerForm", "DeploymentSuspension", "EventWait", "Polling", "PrefectPause", "answer_flow_run"),
    "errors": (
        "AcpError",
        "AlertsError",
        "AuthRequired",
        "BudgetExceeded",
        "CassetteError",
        "CassetteExportError",
        "CassetteMismatch",
        "CliError",
        "HookError",
        "MaxTurnsExceeded",
        "McpServerError",
        "MissingVariableError",
        "ModelError",
        "NexusflowError",
        "OutputError",
        "QuotaExhausted",
        "ResumeError",
        "SessionIdError",
        "SessionLiveError",
        "SubscriptionLimitError",
        "ToolkitError",
        "TransientError",
    ),
    "flows": ("agent_run",),
    "messages": (
        "Answer",
        "AssistantMessage",
        "Message",
        "ModelReply",
        "ModelRequest",
        "Request",
        "RunMetrics",
        "RunResult",
        "SystemMessage",
        "ToolCall",
        "ToolMessage",
        "ToolResult",
        "ToolSpec",
        "TurnStats",
        "Usage",
        "UserMessage",
    ),
    "ops.alerts": (
        "Alert",
        "install_alerts",
        "install_alerts_sync",
        "list_alerts",
        "list_alerts_sync",
        "remove_alerts",
        "remove_alerts_sync",
    ),
    "ops.sessions": (
        "Forgotten",
        "SessionInfo",
        "forget_session",
        "forget_session_sync",
        "list_sessions",
        "list_sessions_sync",
        "prune_sessions",
        "prune_sessions_sync",
    ),
    "state.events": ("RunFinished", "StreamEvent", "TextChunk", "ThoughtChunk", "ToolCallFinished", "ToolCallStarted"),
    "state.store": ("ConversationStore", "LocalConversationStore", "StorageConversationStore"),
    "state.suspension": ("Suspended", "Suspension", "current_answer", "suspend"),
    "tasks.keys": ("POSITIONAL_KEY", "PositionalKey"),
    "toolkit": ("FunctionTool", "Tool", "Toolkit", "tool"),
    "transports.choice": ("Transport",),
    "transports.oneshot": ("UNVERIFIED", "AcpLaunch", "CliStyle", "CliStyles", "load_cli_style"),
}
"""Every public name, by the module it lives in: the one list ``__all__`` and the lazy
loading come from. Each is loaded on first use, so that importing nexusflow (and
``nexusflow --help``) does not import Prefect."""

_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}

__all__ = sorted(_WHERE)


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
