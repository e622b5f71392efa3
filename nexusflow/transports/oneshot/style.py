"""CLI styles: how one agent CLI is launched for one turn, as validated data.

A style names no binary: it is a shape (argv template, prompt channel, answer channel) that
any compatible CLI at any path can be driven with. Built-in styles are the JSON files in
``nexusflow/styles/``; adding a CLI is adding a file.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ...errors import AuthRequired
from ..errors import (
    cli_custom_style_has_no_file,
    cli_style_invalid,
    cli_style_not_json,
    cli_style_unknown,
    cli_style_unreadable,
    style_answer_file_lacks_out,
    style_mode_lacks_placeholder,
    style_unknown_placeholder,
)
from .reports import ReportName

PLACEHOLDERS = ("prompt", "file", "out", "model")
_PLACEHOLDER = re.compile(r"\{\{([^{}]*)\}\}")
UNVERIFIED = "UNVERIFIED"


class CliStyles(StrEnum):
    """The built-in styles, and CUSTOM for a style given field by field."""

    CLAUDE = "claude"
    CODEX = "codex"
    COPILOT = "copilot"
    OPENCODE = "opencode"
    DEVIN = "devin"
    GEMINI = "gemini"
    GOOSE = "goose"
    CUSTOM = "custom"

    @classmethod
    def parse(cls, name: str | CliStyles) -> CliStyles:
        """A style name from a text boundary (flag, parameter, YAML), refused at once if unknown."""
        if isinstance(name, CliStyles):
            return name
        try:
            return cls(name.strip().lower())
        except ValueError:
            raise cli_style_unknown(name, (member.value for member in cls)) from None


class AcpLaunch(BaseModel):
    """How the CLI speaks the Agent Client Protocol, and what an unattended run needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    args: list[str] = Field(default_factory=list, description="argv after the command, e.g. ['--acp'] or ['acp'].")
    adapter: bool = Field(
        default=False,
        description="ACP comes from a separate adapter binary (the client's acp_command), not the CLI itself.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment an unattended session needs.")
    mode: str | None = Field(default=None, description="Session mode to switch to, when the agent offers it.")
    session_meta: dict[str, Any] = Field(
        default_factory=dict,
        description="`_meta` sent with session/new, session/resume and session/load: the agent's own options"
        " that have no protocol field (claude-agent-acp: its built-in tools off, no title or suggestion requests).",
    )
    terminate_on_close: bool = Field(
        default=False,
        description="Send the agent's process group SIGTERM as soon as its stdin is closed, for an agent that"
        " otherwise lingers (codex-acp waits 2 s for its app-server, then sends it SIGTERM itself);"
        " without it nexusflow waits up to 1 s for the agent to exit, then kills the group.",
    )
    verified: str = Field(description=f"The agent version this launch was checked against, or {UNVERIFIED}.")


class CliStyle(BaseModel):
    """One CLI's one-shot shape, and its ACP launch if it has one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    args: list[str | list[str]] = Field(
        description="argv after the command. An element that is a list is an optional group,"
        " kept only when a model is set. Placeholders: {{prompt}}, {{file}}, {{out}}, {{model}}."
    )
    prompt_mode: Literal["stdin", "arg", "file"] = Field(
        description="stdin: the prompt is written to stdin; arg: it fills {{prompt}};"
        " file: it is written to a temporary file named by {{file}}. Otherwise stdin is closed."
    )
    answer: Literal["stdout", "file"] = Field(
        default="stdout", description="stdout, or the temporary file named by {{out}}."
    )
    answer_field: str | None = Field(
        default=None, description="The answer is this dotted field of a JSON output, e.g. 'result'."
    )
    report: ReportName | None = Field(
        default=None,
        description="The built-in reader of the CLI's JSON output (a CLI's name) that reads the usage it reports,"
        " and the answer where the output is a stream of events; None: no usage is read.",
    )
    tools_off: str = Field(default="", description="How the CLI's own tools are switched off for a one-shot turn.")
    tools_left: list[str] = Field(
        default_factory=list,
        description="Own tools the CLI still offers its model with those switches (none can act unattended).",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment; ${VAR} is expanded.")
    error_markers: list[str] = Field(
        default_factory=list,
        description="Output that means failure although the exit status is 0.",
    )
    auth_patterns: list[str] = Field(
        default_factory=list,
        description="Regular expressions (case-insensitive) for what the CLI says when it is not logged in, its"
        " login expired or its credentials are refused; empty when its words cannot be told apart.",
    )
    login: str = Field(default="", description="The command that logs the CLI in, named in AuthRequired's message.")
    model_format: str = Field(default="", description="What a model name looks like for this CLI.")
    verified: str = Field(description=f"The CLI version this style was checked against, or {UNVERIFIED}.")
    acp: AcpLaunch | None = Field(default=None, description="The ACP launch; None when the CLI has none.")

    @field_validator("args")
    @classmethod
    def _known_placeholders(cls, args: list[str | list[str]]) -> list[str | list[str]]:
        for element in _flatten(args):
            for name in _PLACEHOLDER.findall(element):
                if name not in PLACEHOLDERS:
                    raise style_unknown_placeholder(name)
        return args

    @model_validator(mode="after")
    def _channels_have_placeholders(self) -> CliStyle:
        needed = {"arg": "prompt", "file": "file"}.get(self.prompt_mode)
        if needed and not self.uses(needed):
            raise style_mode_lacks_placeholder(self.prompt_mode, needed)
        if self.answer == "file" and not self.uses("out"):
            raise style_answer_file_lacks_out()
        return self

    @field_validator("auth_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            re.compile(pattern)  # re.error is a ValueError: pydantic reports it
        return patterns

    def not_logged_in(self, said: str) -> AuthRequired | None:
        """``said`` means the CLI needs a login, by the style's ``auth_patterns``."""
        if any(re.search(pattern, said, re.IGNORECASE) for pattern in self.auth_patterns):
            return AuthRequired(self.name, said, self.login)
        return None

    @property
    def takes_model(self) -> bool:
        return any("{{model}}" in element for element in _flatten(self.args))

    @property
    def model_required(self) -> bool:
        return any(isinstance(element, str) and "{{model}}" in element for element in self.args)

    def uses(self, placeholder: str) -> bool:
        return any(f"{{{{{placeholder}}}}}" in element for element in _flatten(self.args))

    def argv(
        self, *, model: str | None, prompt: str | None = None, file: str | None = None, out: str | None = None
    ) -> list[str]:
        """The argv after the command; each placeholder fills one element, never split."""
        values = {"model": model, "prompt": prompt, "file": file, "out": out}
        argv: list[str] = []
        for element in self.args:
            if isinstance(element, list):
                if model is not None:
                    argv.extend(_fill(part, values) for part in element)
            else:
                argv.append(_fill(element, values))
        return argv


def _flatten(args: list[str | list[str]]) -> list[str]:
    flat: list[str] = []
    for element in args:
        flat.extend(element if isinstance(element, list) else [element])
    return flat


def _fill(element: str, values: dict[str, str | None]) -> str:
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)] or "", element)


def load_cli_style(source: str | Path | dict[str, Any]) -> CliStyle:
    """A user's style: a path to a JSON file, a JSON text, or a dict."""
    where = "(dict)"
    if isinstance(source, dict):
        data: Any = source
    else:
        text = str(source)
        if isinstance(source, Path) or not text.lstrip().startswith("{"):
            where = text
            try:
                text = Path(source).read_text(encoding="utf-8")
            except OSError as exc:
                raise cli_style_unreadable(where, exc) from exc
        else:
            where = "(JSON text)"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise cli_style_not_json(where, exc) from exc
    try:
        return CliStyle.model_validate(data)
    except ValidationError as exc:
        raise cli_style_invalid(where, exc) from exc


def builtin_style(style: CliStyles) -> CliStyle:
    if style is CliStyles.CUSTOM:
        raise cli_custom_style_has_no_file()
    text = resources.files("nexusflow.styles").joinpath(f"{style.value}.json").read_text(encoding="utf-8")
    return CliStyle.model_validate_json(text)


def custom_style(fields: dict[str, Any]) -> CliStyle:
    try:
        return CliStyle.model_validate({"name": "custom", "verified": UNVERIFIED, **fields})
    except ValidationError as exc:
        raise cli_style_invalid("custom", exc) from exc
