"""``create_cli_client``: a client whose model is the user's own agent CLI. Apart from
``client`` so that a program with an in-process model never imports the CLI and ACP
transports."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal, TypedDict, Unpack

from pydantic import ValidationError

from ._prefect.server import use_server
from .client import Client, ClientKeywords, client_options
from .config._checks import refusal
from .config.errors import argument_wrong
from .config.settings import settings
from .config.subscription import SubscriptionLimit
from .messages import OutputT
from .transports.cassette import Cassette
from .transports.choice import Transport, agent_cli_transport
from .transports.oneshot import CliStyle, CliStyles
from .transports.oneshot.process import MAX_OUTPUT


class StyleFields(TypedDict, total=False):
    """The fields of a ``CliStyle`` that ``create_cli_client`` takes as keywords, to describe a
    ``CliStyles.CUSTOM`` CLI (their meaning: ``CliStyle``'s own fields)."""

    args: list[str | list[str]]
    prompt_mode: Literal["stdin", "arg", "file"]
    answer: Literal["stdout", "file"]
    answer_field: str | None
    tools_off: str
    tools_left: list[str]
    error_markers: list[str]
    auth_patterns: list[str]
    login: str
    model_format: str


class CliClientKeywords(ClientKeywords, StyleFields, total=False):
    """What ``create_cli_client`` takes as keywords: the client's options and a custom
    style's fields."""


STYLE_FIELDS = tuple(StyleFields.__annotations__)


def create_cli_client(
    style: CliStyles | CliStyle,
    command: str | None = None,
    model: str | None = None,
    *,
    transport: Transport | None = None,
    acp_command: str | None = None,
    timeout: float | None = None,
    retry_on: str | Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    workspace: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    repair_budget: int | None = None,
    max_output: int = MAX_OUTPUT,
    limit: str | None = None,
    max_concurrent: int | None = None,
    per_minute: float | None = None,
    output_type: type[OutputT] | None = None,
    cassette: Cassette | str | os.PathLike[str] | None = None,
    **keywords: Unpack[CliClientKeywords],
) -> Client[OutputT]:
    """A client whose model is the user's own agent CLI.

    ``command`` is the CLI's path or name: required, nexusflow never picks a binary.
    ``transport``: ``AUTO`` keeps one warm ACP session per run when the style declares an
    ACP launch and the binary answers ``initialize``, else launches the CLI once per turn;
    ``ACP`` or ``CLI`` force one. Styles whose ACP comes from an adapter (claude, codex) take
    its path as ``acp_command``. ``env`` adds environment for the CLI (``${VAR}`` expanded at
    launch, never logged); over ACP the agent gets only a minimal base environment plus the
    style's and this. ``timeout`` bounds one launch or one ACP turn. ``retry_on``: regular
    expressions (searched ignoring case) that make a failure whose message matches one a
    ``TransientError``, retried with ``model_retries=``: what a failed launch printed, an
    error the CLI reported, an ACP agent's error; none by default. ``workspace`` bounds
    where the ACP session may run, ``cwd`` (inside it) is where it runs. ``repair_budget``
    is how many times a malformed one-shot reply is sent back with its complaint.
    ``transport``, ``timeout``, ``retry_on`` and ``repair_budget`` not given come from
    ``NEXUSFLOW_TRANSPORT``, ``NEXUSFLOW_TIMEOUT`` (default 300 s), ``NEXUSFLOW_RETRY_ON`` (a
    JSON list) and ``NEXUSFLOW_REPAIR_BUDGET`` (default 2). ``max_output`` caps each of a
    launch's stdout and stderr (bytes, default 16 MiB). With ``style=CliStyles.CUSTOM`` pass
    the style's fields (``args``, ``prompt_mode``, ...) as keywords. ``limit``,
    ``max_concurrent`` and ``per_minute`` hold your subscription's limits across every
    worker, as for ``create_in_process_client``. ``cassette`` (a ``nexusflow.testing.Cassette``
    or a path) records each launch, or replays it with no process started; a path's mode
    comes from ``NEXUSFLOW_CASSETTE_MODE`` (default ``auto``). Every other keyword is a client
    option.
    """
    where = "create_cli_client"
    subscription = SubscriptionLimit.of(limit, max_concurrent, per_minute)
    options: dict[str, Any] = dict(keywords)
    fields = {key: options.pop(key) for key in STYLE_FIELDS if key in options}
    default = settings()
    if cassette is not None and not isinstance(cassette, Cassette):
        if not isinstance(cassette, str | os.PathLike):
            raise argument_wrong(where, "cassette", "a Cassette or a path", cassette)
        cassette = Cassette(cassette)
    try:
        factory = agent_cli_transport(
            style,
            command,
            model,
            transport=Transport(default.transport) if transport is None else transport,
            acp_command=acp_command,
            timeout=default.timeout if timeout is None else timeout,
            retry_on=default.retry_on if retry_on is None else retry_on,
            env=env,
            workspace=workspace,
            cwd=cwd,
            repair_budget=default.repair_budget if repair_budget is None else repair_budget,
            max_output=max_output,
            fields=fields,
            cassette=cassette,
        )
    except ValidationError as exc:
        raise refusal(where, exc, []) from None
    checked = client_options(where, model, subscription, output_type, options)
    client: Client[OutputT] = Client(factory, checked, name=style.name if isinstance(style, CliStyle) else style.value)
    use_server()  # checked first; before a flow of the program's own starts the embedded server
    return client
