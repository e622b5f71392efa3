"""The one-shot CLI transport: each model turn is one launch of the user's agent CLI (one
more per repair), with the request in our envelope."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..._support.secrets import register_environment
from ..._support.tracing import resource_environment
from ...config._env import expand, expand_all
from ...errors import CliError, CliTransientError, MissingVariableError, QuotaExhausted
from ...messages import ModelReply, ModelRequest, TurnStats, Usage
from ..base import TurnScope
from ..cassette import Answer, Asked, Cassette, Scrub, secret_values
from ..errors import (
    cli_empty_reply,
    cli_exit,
    cli_malformed_reply,
    cli_needs_a_model,
    cli_no_output_file,
    cli_not_found,
    cli_not_utf8,
    cli_output_lacks_field,
    cli_output_not_json,
    cli_prompt_too_long,
    cli_replayed_failure,
    cli_reported_error,
    cli_style_fields_not_custom,
    cli_style_wrong_type,
    cli_takes_no_model,
)
from ..retry_on import retry_matches
from .envelope import REQUEST_MARKER, parse_reply, render, request_json
from .process import MAX_OUTPUT, Finished, run_cli
from .reports import ANSWERS, READERS, Reported, refuse
from .style import CliStyle, CliStyles, builtin_style, custom_style

ARG_LIMIT = 128 * 1024
"""Linux refuses one argv element of 128 KiB or more (MAX_ARG_STRLEN, the NUL included)."""


class CliConfig(BaseModel):
    """Everything a CLI client needs to launch a turn. ``env`` values keep their
    ``${VAR}`` form here; they are expanded at launch and never stored expanded."""

    model_config = ConfigDict(frozen=True)

    style: CliStyle
    command: str
    model: str | None = None
    timeout: float = Field(default=300.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    repair_budget: int = Field(default=2, ge=0)
    max_output: int = Field(
        default=MAX_OUTPUT, gt=0, description="Bytes each of stdout and stderr may carry; past it the turn fails."
    )
    retry_on: tuple[str, ...] = Field(
        default=(), description="Patterns of a failure's message that make it a TransientError (see ``retry_on``)."
    )


def _decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise cli_not_utf8(what, data, exc.start) from None


def _field(text: str, path: str) -> str:
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise cli_output_not_json(path, text) from exc
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise cli_output_lacks_field(path, text)
        value = value[key]
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class CliTransport:
    """``cassette``: launches are recorded to it, or replayed from it with no process started."""

    def __init__(self, config: CliConfig, cassette: Cassette | None = None) -> None:
        self.config = config
        self.cassette = cassette

    def _environment(self, scratch: str | None = None) -> dict[str, str]:
        """The parent's environment and the style's and client's variables. With ``scratch``
        (the launch's temporary folder) it is the CLI's ``TMPDIR`` too, unless one is given:
        a CLI leaves files in its temporary folder (gemini a report of every model error,
        claude its probes and sockets), which a job that runs for weeks would pile up. Its
        secret-named values are registered for redaction: the CLI may print them."""
        given = {**expand_all(self.config.style.env), **expand_all(self.config.env)}
        private = {"TMPDIR": scratch} if scratch is not None and "TMPDIR" not in given else {}
        env = {**os.environ, **private, **given}
        env.update(resource_environment(env))
        register_environment(env)
        return env

    async def generate(self, request: ModelRequest, scope: TurnScope | None = None) -> ModelReply:
        """Launch the CLI; send a malformed envelope back with its complaint, up to the
        repair budget; then fail with the last complaint. A failed launch whose message
        matches ``retry_on`` is a ``TransientError`` carrying the launches it took."""
        tools = {spec.name for spec in request.tools}
        turn = scope.step if scope is not None else None
        complaint: str | None = None
        attempts = 1 + self.config.repair_budget
        usage = Usage()
        for attempt in range(attempts):
            try:
                launched = await self._launch(request, complaint, turn, attempt + 1)
            except CliError as exc:
                if retry_matches(self.config.retry_on, str(exc)):
                    raise CliTransientError(str(exc), launches=attempt + 1) from exc
                raise
            if isinstance(launched, ModelReply):
                return launched  # an exported turn: parsed already, no launch made
            answer, used = launched
            usage += used  # a repair is paid for too
            parsed = parse_reply(answer, tools, request.messages)
            if isinstance(parsed, ModelReply):
                stats = TurnStats(launches=attempt + 1, repairs=attempt)
                return parsed.model_copy(update={"stats": stats, "usage": usage})
            complaint = parsed.message
        raise cli_malformed_reply(attempts, complaint)

    async def _launch(
        self, request: ModelRequest, complaint: str | None, turn: int | None, launch: int
    ) -> tuple[str, Usage] | ModelReply:
        """The CLI's answer and what it cost; replaying, the reply an exported launch holds."""
        config = self.config
        style = config.style
        prompt = render(request, complaint)
        if style.prompt_mode == "arg" and len(prompt.encode()) >= ARG_LIMIT:
            raise cli_prompt_too_long(len(prompt.encode()), ARG_LIMIT, style.name)
        cassette = self.cassette
        if cassette is not None and cassette.replaying:
            return self._replay(cassette, self._asked(request, prompt), turn, launch)
        executable = shutil.which(config.command, path=self._environment().get("PATH"))
        if executable is None:
            raise cli_not_found(config.command)
        with tempfile.TemporaryDirectory(prefix="nexusflow-cli-") as scratch:
            env = self._environment(scratch)
            prompt_file = Path(scratch, "prompt.txt")
            answer_file = Path(scratch, "answer.txt")
            if style.prompt_mode == "file":
                prompt_file.write_text(prompt, encoding="utf-8")
            argv = [
                executable,
                *style.argv(
                    model=config.model,
                    prompt=prompt if style.prompt_mode == "arg" else None,
                    file=str(prompt_file),
                    out=str(answer_file),
                ),
            ]
            stdin = prompt.encode() if style.prompt_mode == "stdin" else None
            started = time.perf_counter()
            try:
                finished = await run_cli(
                    argv,
                    stdin=stdin,
                    env=env,
                    cwd=config.cwd,
                    timeout=config.timeout,
                    max_output=config.max_output,
                    scratch=scratch,
                )
            except CliError as exc:
                if cassette is not None:
                    failed = Answer(failed=str(exc))
                    await self._record(cassette, request, prompt, failed, turn, launch, time.perf_counter() - started)
                raise
            written = answer_file.read_bytes() if answer_file.exists() else None
        if cassette is not None:
            answer = _recorded(finished, written)
            await self._record(cassette, request, prompt, answer, turn, launch, finished.seconds)
        return self._answer(finished, written)

    def _asked(self, request: ModelRequest, prompt: str) -> Asked:
        """The launch as a cassette keeps it: the binary by name, the temporary files and the
        prompt as placeholders in argv, the prompt split around the request body."""
        style = self.config.style
        argv = style.argv(
            model=self.config.model,
            prompt="{{prompt}}" if style.prompt_mode == "arg" else None,
            file="{{file}}",
            out="{{out}}",
        )
        head, _, tail = prompt.partition(REQUEST_MARKER)
        body = request_json(request)
        assert tail.startswith(body), "render puts the request body right after the marker"
        return Asked(
            argv=[Path(self.config.command).name, *argv],
            prompt=head,
            request=request.body(),
            repair=tail[len(body) :] or None,
        )

    def _scrub(self, cassette: Cassette) -> Scrub:
        """What the cassette masks: the secret-named variables of the CLI's environment, the
        inherited ones included (a ``${VAR}`` that is not set, as when replaying in CI, is
        left out)."""
        named = {**self.config.style.env, **self.config.env}
        values = dict(os.environ)
        for name, value in named.items():
            try:
                values[name] = expand(value)
            except MissingVariableError:
                continue
        return cassette.scrub(secret_values(values))

    async def _record(
        self,
        cassette: Cassette,
        request: ModelRequest,
        prompt: str,
        answer: Answer,
        turn: int | None,
        launch: int,
        seconds: float,
    ) -> None:
        asked = self._asked(request, prompt)
        await cassette.record(asked, answer, turn=turn, launch=launch, seconds=seconds, scrub=self._scrub(cassette))

    def _replay(
        self, cassette: Cassette, asked: Asked, turn: int | None, launch: int
    ) -> tuple[str, Usage] | ModelReply:
        answer = cassette.play(asked, turn, launch, self._scrub(cassette))
        if isinstance(answer, ModelReply):
            return answer
        if answer.failed is not None:
            raise cli_replayed_failure(answer.failed)
        stdout = bytes.fromhex(answer.stdout) if "stdout" in answer.hex else answer.stdout.encode()
        written = answer.file
        file = None if written is None else bytes.fromhex(written) if "file" in answer.hex else written.encode()
        return self._answer(Finished(code=answer.exit, stdout=stdout, stderr=answer.stderr.encode(), seconds=0.0), file)

    def _said(self, stdout: str) -> str:
        """What a failing CLI said on stdout: its JSON answer field when it has one."""
        field = self.config.style.answer_field
        if field:
            try:
                return _field(stdout, field)
            except CliError:
                pass
        return stdout

    def _answer(self, finished: Finished, written: bytes | None) -> tuple[str, Usage]:
        """``written``: what the CLI wrote to its answer file, None when it wrote none."""
        style = self.config.style
        stdout = _decode(finished.stdout, "the output")
        stderr = finished.stderr.decode("utf-8", errors="replace")
        reported = READERS[style.report](stdout, stderr) if style.report is not None else Reported(Usage())
        if finished.code != 0:
            said = reported.error or (stderr if stderr.strip() else self._said(stdout))
            for words in (said, stderr, self._said(stdout)):  # a login refused is never retried: see AuthRequired
                if (login := style.not_logged_in(words)) is not None:
                    raise login
            if reported.quota is not None:
                raise QuotaExhausted(style.name, reported.quota.resets_at, said)
            raise cli_exit(finished.code, said)
        answering = style.report in ANSWERS
        for marker in style.error_markers:
            for stream in (reported.text or "", stderr) if answering else (stdout, stderr):
                if marker in stream:
                    raise cli_reported_error(stream[stream.index(marker) :])
        if reported.error is not None and not (reported.text or "").strip():
            if (login := style.not_logged_in(reported.error)) is not None:
                raise login
            if reported.quota is not None:
                raise QuotaExhausted(style.name, reported.quota.resets_at, reported.error)
            raise cli_reported_error(reported.error)
        if answering:
            if reported.text is None:
                refuse(ANSWERS[str(style.report)], stdout)
            text = reported.text
        elif style.answer == "file":
            if written is None:
                raise cli_no_output_file()
            text = _decode(written, "the output file")
        else:
            text = stdout
        usage = reported.usage
        if style.answer_field and text.strip():
            text = _field(text, style.answer_field)
        if not text.strip():
            raise cli_empty_reply()
        return text, usage


def _recorded(finished: Finished, written: bytes | None) -> Answer:
    """A finished launch as a cassette keeps it: text, or hex where it is not UTF-8."""
    hexed: list[Literal["stdout", "file"]] = []

    def kept(data: bytes, name: Literal["stdout", "file"]) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            hexed.append(name)
            return data.hex()

    stdout = kept(finished.stdout, "stdout")
    file = None if written is None else kept(written, "file")
    stderr = finished.stderr.decode("utf-8", errors="replace")
    return Answer(exit=finished.code, stdout=stdout, stderr=stderr, file=file, hex=hexed)


def resolve_style(style: CliStyles | CliStyle, fields: dict[str, Any], model: str | None) -> CliStyle:
    """The style a client will use, checked against the model before anything runs."""
    if isinstance(style, CliStyle):
        chosen = style
    elif isinstance(style, CliStyles):
        chosen = custom_style(fields) if style is CliStyles.CUSTOM else builtin_style(style)
    else:
        raise cli_style_wrong_type(style)
    if fields and style is not CliStyles.CUSTOM:
        raise cli_style_fields_not_custom(fields)
    if model is not None and not chosen.takes_model:
        raise cli_takes_no_model(chosen.name)
    if model is None and chosen.model_required:
        raise cli_needs_a_model(chosen.name)
    return chosen
