"""What each CLI's JSON output says about a turn: its usage, and for the CLIs whose JSON
output is a stream of events, the answer too.

Figures are read, never made up: a field the CLI does not print stays ``None``. A reader
never fails a turn over usage; only a reader that gives the answer refuses output that is
not the CLI's JSON (``cli_output_not_json``), as ``answer_field`` does.
Shapes were read from the pinned CLIs against the scripted model server (``.ci/agents.json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple, NoReturn

from ...messages import Usage
from ..errors import cli_output_lacks_field, cli_output_not_json
from ..subscription import EPOCH, Quota, resets_at, spent_quota

ReportName = Literal["claude", "codex", "gemini", "copilot", "opencode", "goose"]


class Reported(NamedTuple):
    usage: Usage
    text: str | None = None
    """The answer, for a reader that gives it; otherwise the style's answer channel does."""
    error: str | None = None
    """What the CLI's JSON output says went wrong, when it says so there (not on stderr)."""
    quota: Quota | None = None
    """Set when what went wrong is a spent quota window."""


ANSWERS: dict[str, str] = {"copilot": "assistant.message", "opencode": "text", "goose": "messages"}
"""The readers that give the answer, and the field it comes from (for the error when absent)."""

TOKENLESS = frozenset({"copilot"})
"""The CLIs whose JSON output states no token counts (copilot counts premium requests only)."""


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _cost(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _events(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines output; other lines (a warning, a banner) are skipped."""
    for line in text.splitlines():
        if line.lstrip().startswith("{"):
            event = _object(line)
            if event:
                yield event


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _message(value: Any) -> str | None:
    """An error's message; a provider's JSON error body quoted inside it is unwrapped."""
    if not isinstance(value, str) or not value.strip():
        return None
    inner = _dict(_object(value).get("error")).get("message")
    return inner if isinstance(inner, str) and inner.strip() else value


def _claude(stdout: str, stderr: str) -> Reported:
    """``--output-format json``: one result object; ``modelUsage`` is keyed by model. A
    failure is ``is_error`` with the model's words in ``result``: that is the error, not
    stderr, where 2.1.332 adds a diagnostic of its own (``[claude-code:unrecognized_model]``
    for a model id it does not know) that would otherwise hide them."""
    result = _object(stdout)
    usage = _dict(result.get("usage"))
    models = list(_dict(result.get("modelUsage")))
    said = result.get("result") if result.get("is_error") is True and isinstance(result.get("result"), str) else None
    spent = result.get("api_error_status") == 429 or (said is not None and EPOCH.search(said) is not None)
    return Reported(
        Usage(
            input_tokens=_count(usage.get("input_tokens")),
            output_tokens=_count(usage.get("output_tokens")),
            cache_read_tokens=_count(usage.get("cache_read_input_tokens")),
            cache_write_tokens=_count(usage.get("cache_creation_input_tokens")),
            cost_usd=_cost(result.get("total_cost_usd")),
            model=models[0] if len(models) == 1 else None,
        ),
        error=said,
        quota=Quota(resets_at(said or "")) if spent else None,
    )


def _codex(stdout: str, stderr: str) -> Reported:
    """``exec --json``: events on stdout, ``turn.completed`` carries the usage (the answer
    stays in the ``-o`` file), ``turn.failed`` the error. ``input_tokens`` counts the
    cached ones too."""
    usage = Usage()
    error: str | None = None
    for event in _events(stdout):
        if event.get("type") == "turn.failed":
            error = _message(_dict(event.get("error")).get("message")) or error
        elif event.get("type") == "turn.completed":
            figures = _dict(event.get("usage"))
            usage += Usage(
                input_tokens=_count(figures.get("input_tokens")),
                output_tokens=_count(figures.get("output_tokens")),
                cache_read_tokens=_count(figures.get("cached_input_tokens")),
                cache_write_tokens=_count(figures.get("cache_write_input_tokens")),
            )
    return Reported(usage, error=error, quota=spent_quota(error))


def _gemini(stdout: str, stderr: str) -> Reported:
    """``-o json``: ``stats.models`` holds per-model token counts; ``prompt`` counts the
    cached tokens too (``input`` does not)."""
    usage = Usage()
    for model, stats in _dict(_dict(_object(stdout).get("stats")).get("models")).items():
        tokens = _dict(_dict(stats).get("tokens"))
        usage += Usage(
            input_tokens=_count(tokens.get("prompt")),
            output_tokens=_count(tokens.get("candidates")),
            cache_read_tokens=_count(tokens.get("cached")),
            model=model,
        )
    # A failure is a JSON object after the stack trace on stderr.
    failure = _dict(_object(stderr[stderr.rfind("\n{") + 1 :]).get("error")) if "{" in stderr else {}
    error = _message(failure.get("message"))
    spent = failure.get("code") == 429 or spent_quota(error) is not None
    return Reported(usage, error=error, quota=Quota(resets_at(error or "")) if spent else None)


def _copilot(stdout: str, stderr: str) -> Reported:
    """``--output-format json``: events; the answer is the last ``assistant.message``. The
    CLI states no token counts (its ``result`` event counts premium requests only)."""
    text: str | None = None
    model: str | None = None
    error: str | None = None
    for event in _events(stdout):
        if event.get("type") == "session.error":
            error = _message(_dict(event.get("data")).get("message")) or error
        elif event.get("type") == "assistant.message":
            data = _dict(event.get("data"))
            content = data.get("content")
            if isinstance(content, str) and content.strip():
                text = content
                model = data.get("model") if isinstance(data.get("model"), str) else model
    return Reported(Usage(model=model), text, error, spent_quota(error))


def _opencode(stdout: str, stderr: str) -> Reported:
    """``--format json``: events; the answer is the ``text`` parts joined, the usage the sum
    of the ``step_finish`` parts (tokens and the cost opencode states)."""
    texts: list[str] = []
    usage = Usage()
    finished = False
    error: str | None = None
    for event in _events(stdout):
        part = _dict(event.get("part"))
        if event.get("type") == "error":
            error = _message(_dict(_dict(event.get("error")).get("data")).get("message")) or error
        elif event.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif event.get("type") == "step_finish":
            finished = True
            tokens = _dict(part.get("tokens"))
            cache = _dict(tokens.get("cache"))
            usage += Usage(
                input_tokens=_count(tokens.get("input")),
                output_tokens=_count(tokens.get("output")),
                cache_read_tokens=_count(cache.get("read")),
                cache_write_tokens=_count(cache.get("write")),
                cost_usd=_cost(part.get("cost")),
            )
    return Reported(usage, "".join(texts) if texts or finished else None, error)


def _goose(stdout: str, stderr: str) -> Reported:
    """``--output-format json``: the conversation and a ``metadata`` of token counts; the
    answer is the last assistant message's text."""
    output = _object(stdout)
    messages = output.get("messages")
    if not isinstance(messages, list):
        return Reported(Usage())
    said = [_dict(message) for message in messages if _dict(message).get("role") == "assistant"]
    last = said[-1] if said else {}
    content = last.get("content")
    parts = [_dict(part) for part in content] if isinstance(content, list) else []
    text = "".join(str(part["text"]) for part in parts if part.get("type") == "text" and "text" in part)
    inference = _dict(_dict(last.get("metadata")).get("inference"))
    figures = _dict(output.get("metadata"))
    return Reported(
        Usage(
            input_tokens=_count(figures.get("input_tokens")),
            output_tokens=_count(figures.get("output_tokens")),
            cache_read_tokens=_count(figures.get("cache_read_input_tokens")),
            cache_write_tokens=_count(figures.get("cache_write_input_tokens")),
            model=inference.get("requestedModel") if isinstance(inference.get("requestedModel"), str) else None,
        ),
        text,
    )


def refuse(field: str, stdout: str) -> NoReturn:
    """The output of a reader that gives the answer holds none."""
    if not stdout.strip() or not (_object(stdout) or any(_events(stdout))):
        raise cli_output_not_json(field, stdout)
    raise cli_output_lacks_field(field, stdout)


READERS: dict[str, Callable[[str, str], Reported]] = {
    "claude": _claude,
    "codex": _codex,
    "gemini": _gemini,
    "copilot": _copilot,
    "opencode": _opencode,
    "goose": _goose,
}
