"""The MCP server itself: the tools (names fixed by the public interface), the transcript
resource, and ``--read-only``, which serves only what changes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import ToolAnnotations

from .._prefect.retry import is_transient
from .._prefect.server import use_server
from .._support.version import package_version
from ..errors import NexusflowError, PrefectApiError
from ..ops.sessions import SessionInfo
from . import runs
from .tasks import Tasks, forget_task
from .views import Answered, Cancelling, RunState, RunView, StartedRun

P = ParamSpec("P")
T = TypeVar("T")

NAME = "nexusflow"
INSTRUCTIONS = (
    "Durable agent runs on Prefect. start_run returns at once with a session id; poll get_run "
    "until its state is waiting (answer its request with answer, by its request_id), completed "
    "(read text, output and usage), failed, crashed or cancelled. Runs go on when this server stops."
)
TRANSCRIPT = "nexusflow://sessions/{session_id}/transcript"


def _refused(error: type[Exception]) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """A refusal or a Prefect API that fails is the tool's one-line error; anything else is a
    bug, which the SDK logs with its traceback and hides from the client."""

    def wrap(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @wraps(fn)
        async def refusing(*args: P.args, **kwargs: P.kwargs) -> T:
            use_server()
            try:
                return await fn(*args, **kwargs)
            except NexusflowError as exc:
                raise error(str(exc)) from exc
            except Exception as exc:
                if is_transient(exc):
                    raise error(str(PrefectApiError(exc))) from exc
                raise

        return refusing

    return wrap


def build(agent: runs.Agent | None, *, read_only: bool = False) -> MCPServer:
    # Tasks change runs (an answer, a cancel): a read-only server serves none.
    extensions = [] if read_only else [Tasks()]
    server: MCPServer = MCPServer(
        NAME, version=package_version(), instructions=INSTRUCTIONS, log_level="WARNING", extensions=extensions
    )
    looks = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=looks)
    @_refused(ToolError)
    async def get_run(session_id: str | None = None, flow_run_id: str | None = None, wait: float = 0) -> RunView:
        """Where a run stands, by its session id or a flow run id: its state (running, waiting,
        completed, failed, crashed, cancelled), turns and tool calls so far, its last step, the
        request a waiting run asks to be answered, and once completed its answer, typed output
        and usage. wait (0 to 50 seconds) returns as soon as a running run stops running."""
        return await runs.get_run(session_id, flow_run_id, wait)

    @server.tool(annotations=looks)
    @_refused(ToolError)
    async def list_sessions(state: list[RunState] | None = None, older_than: str | None = None) -> list[SessionInfo]:
        """The sessions on this Prefect server, the most recently active first; state keeps those
        states only, older_than (7d, 12h, 30m) those idle for longer."""
        return await runs.sessions(list(state or []), older_than)

    @server.resource(TRANSCRIPT, mime_type="text/markdown", description="A session's latest transcript.")
    @_refused(ResourceError)
    async def transcript(session_id: str) -> str:
        return await runs.transcript(session_id)

    if read_only:
        return server

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True))
    @_refused(ToolError)
    async def start_run(
        prompt: str | None = None,
        deployment: str | None = None,
        parameters: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> StartedRun:
        """Start a durable run and return at once with its session id and flow run: of a
        deployment (flow-name/deployment-name, with parameters), else of this server's agent.
        A session_id goes on with that session (a new prompt, or, without one, from its last
        finished step). A client that declares the Tasks extension gets a task that follows the run."""
        started = await runs.start_run(agent, prompt, deployment, parameters, session_id)
        if session_id is not None:
            await forget_task(started.session_id)
        return started

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
    @_refused(ToolError)
    async def answer(
        session_id: str, request_id: str, approve: bool, data: Any = None, reason: str | None = None
    ) -> Answered:
        """Answer the request a waiting run asks (get_run's waiting.request_id): approve or deny,
        with data for the tool and a reason. Used once: a second answer is refused."""
        return await runs.answer(session_id, request_id, approve, data, reason)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
    @_refused(ToolError)
    async def cancel_run(session_id: str | None = None, flow_run_id: str | None = None) -> Cancelling:
        """Cancel a running run: it stops, Cancelled in Prefect, and can go on later from its
        finished steps (start_run with its session_id)."""
        return await runs.cancel_run(session_id, flow_run_id)

    return server
