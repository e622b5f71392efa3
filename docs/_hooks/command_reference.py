"""The command's reference, generated when the site is built from the command itself: the
``<!-- nexusflow-help -->`` marker becomes the ``--help`` of every command the ``nexusflow``
app declares, as the command prints it, so the page cannot drift from the flags."""

from __future__ import annotations

import io
from typing import Any

MARKER = "<!-- nexusflow-help -->"


def _commands() -> list[list[str]]:
    """Every command of the app, ``styles`` subcommands included, help flags left out."""
    from nexusflow.command import app

    commands: list[list[str]] = [[]]
    for name in app:
        if not name.startswith("-"):
            commands.append([name])
            commands += [[name, sub] for sub in app[name] if not sub.startswith("-") and name in ("styles", "alerts")]
    return commands


def _help(command: list[str]) -> str:
    from rich.console import Console

    from nexusflow.command import app

    printed = io.StringIO()
    app.help_print(command, console=Console(width=80, file=printed, color_system=None, force_terminal=False))
    return "\n".join(line.rstrip() for line in printed.getvalue().splitlines())


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    sections = [
        f"### `{' '.join(['nexusflow', *command])}`\n\n```text\n{_help(command)}\n```\n" for command in _commands()
    ]
    return markdown.replace(MARKER, "\n".join(sections))
