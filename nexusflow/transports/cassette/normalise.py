"""What makes a recording safe to commit and a request comparable across machines and runs.

Secrets become ``***`` everywhere: the values nexusflow registered (``${VAR}`` expansions,
the tokens it mints) and the secret-named values of the CLI's or agent's environment, the
inherited ones included (``_secrets.secret_values``).
Known places (the working directory, the home folder, a test's own ``tmp_path``) become
placeholders everywhere, and an answer gets them back on replay, so a model that quoted a
path quotes the replaying machine's. The times a CLI stamps on its own output (``STAMPS``)
are fixed everywhere; a time the model said is its answer and is kept. In what a launch
asked, which is compared and never played back, volatile values are normalised for good:
other temporary paths, timestamps, and tool-call ids (numbered by first appearance: a model
that names no id gets a random one).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..._support.secrets import MASK, longest, redact

TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b")
_TIMED = r'("(?:timestamp|created|createdAt|updatedAt|start|end)"\s*:\s*)'
STAMPS = [
    (re.compile(_TIMED + r'"\d{4}-\d{2}-\d{2}T[^"]*"'), r'\1"<timestamp>"'),
    (re.compile(_TIMED + r"1\d{9}(?:\d{3})?(?![\d.])"), r"\g<1>0"),
    (re.compile(r"(<current_datetime>)[^<]*(</current_datetime>)"), r"\1<timestamp>\2"),
]
"""The times a CLI stamps on its own output: a JSON field (copilot's ``"timestamp":
"2026-..."``, goose's ``"created": 1796418068``, opencode's ``"start": 1796418061261``; its
key unescaped, so a model's text quoted inside the output never matches) and the clock
copilot puts before the prompt it echoes. A string stays a string, a number a number."""
_NAME = r"[\w.~+@%=-]"
_END = rf"(?:(?!{_NAME})|(?=\.+(?!{_NAME})))"
"""A place ends where a path component ends (``/home/al`` is not in ``/home/alice``, nor in
``/home/al.bak``): before a character a file name does not go on with (a space, a slash, a
quote, a bracket, ``,;:!?``), or before full stops that end a sentence, not an extension."""


def default_places() -> dict[str, str]:
    return {"<cwd>": os.getcwd(), "<home>": str(Path.home())}


class Scrub:
    def __init__(self, places: Mapping[str, str], secrets: Iterable[str] = ()) -> None:
        kept = sorted(((name, value) for name, value in places.items() if len(value) > 1), key=lambda p: -len(p[1]))
        self._places = [(name, re.compile(re.escape(value) + _END), value) for name, value in kept]
        self._secrets = sorted({value for value in secrets if len(value) >= 4}, key=len, reverse=True)
        self._temporary = re.compile(r"(?<![\w./-])" + re.escape(tempfile.gettempdir().rstrip("/")) + r"/[^\s\"'`]*")

    def safe(self, text: str) -> str:
        """Secrets masked, places replaced: what an answer is stored as."""
        text = redact(text)
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        for name, pattern, _ in self._places:
            text = pattern.sub(name, text)
        for pattern, fixed in STAMPS:
            text = pattern.sub(fixed, text)
        return text

    def reach(self) -> int:
        """The most characters one mask of ``safe`` spans: a place's with the character after
        it, which decides where it ends."""
        return max([longest(), *map(len, self._secrets), *(len(value) + 1 for _, _, value in self._places)])

    def restore(self, text: str) -> str:
        """An answer as the replaying machine would have heard it: places put back."""
        for name, _, value in self._places:
            text = text.replace(name, value)
        return text

    def stable(self, text: str) -> str:
        """Safe, and the volatile values of a request normalised."""
        return TIMESTAMP.sub("<timestamp>", self._temporary.sub("<tmp>", self.safe(text)))

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with every string stable and its tool-call ids numbered."""
        ids: dict[str, str] = {}

        def number(value: Any) -> Any:
            if not isinstance(value, str):
                return value
            return ids.setdefault(value, f"call#{len(ids) + 1}")

        def walk(value: Any, key: str | None, in_calls: bool) -> Any:
            if isinstance(value, dict):
                return {
                    k: number(v) if k == "tool_call_id" or (in_calls and k == "id") else walk(v, k, False)
                    for k, v in value.items()
                }
            if isinstance(value, list):
                return [walk(item, None, key == "tool_calls") for item in value]
            return self.stable(value) if isinstance(value, str) else value

        walked: dict[str, Any] = walk(body, None, False)
        return walked
