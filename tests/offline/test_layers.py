"""The house: a top floor of the modules a user meets, over wings (folders) in one order, and
imports that run one way, down it. From the top: ``nexusflow mcp`` (``mcp_server``, over the
commands whose work it shares); the command; the package; ``job`` and
``demo``; ``testing``; the client; the run's flows, composition and the operator's side
(``ops``); the run's tasks; the transports; the toolkit; what a user configures (``config``);
a run's state (``state``); Prefect's edge (``_prefect``); the conversation's types
(``messages``); the errors; and the floor under everything (``_support``). No module imports
itself back through others, ``TYPE_CHECKING`` and function-level imports included. Read from
the source (no import runs), so a circle hidden behind ``TYPE_CHECKING`` counts."""

from __future__ import annotations

import ast
from pathlib import Path

from paths import REPO

PACKAGE = REPO / "nexusflow"

LAYERS: list[tuple[int, tuple[str, ...]]] = [
    (16, ("nexusflow.__main__", "nexusflow.mcp_server")),
    (15, ("nexusflow.command",)),
    (14, ("nexusflow",)),
    (13, ("nexusflow.demo", "nexusflow.job")),
    (12, ("nexusflow.testing",)),
    (11, ("nexusflow.cli_client",)),
    (10, ("nexusflow.client",)),
    (9, ("nexusflow.flows", "nexusflow.compose", "nexusflow.ops")),
    (8, ("nexusflow.tasks",)),
    (7, ("nexusflow.transports",)),
    (6, ("nexusflow.toolkit",)),
    (5, ("nexusflow.config",)),
    (4, ("nexusflow.state",)),
    (3, ("nexusflow._prefect",)),
    (2, ("nexusflow.messages",)),
    (1, ("nexusflow.errors",)),
    (0, ("nexusflow._support",)),
]
"""Higher layers may import lower ones; a module may import its own layer only within its
own wing (``nexusflow.tasks.turn`` -> ``nexusflow.tasks.keys``). ``agent_job`` is a flow
over the client (a deployment's job builds one), so it sits above it."""

TOP_FLOOR = {"__init__", "__main__", "cli_client", "client", "compose", "demo", "errors", "job", "messages"}
"""The modules in no wing: what a user imports, and the two every wing reads (the errors and
the conversation's types). Anything else belongs in a wing."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> tuple[int, str]:
    best: tuple[int, str] | None = None
    for rank, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    assert best is not None, f"{module} has no layer: add it to LAYERS"
    return best


def imported_from(path: Path, module: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` in ``module`` (read from ``path``) names, relative or not."""
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(path: Path, module: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("nexusflow"))
        elif isinstance(node, ast.ImportFrom):
            target = imported_from(path, module, node)
            if not target.startswith("nexusflow"):
                continue
            for alias in node.names:  # `from . import x` may name a submodule
                candidate = f"{target}.{alias.name}"
                found.add(candidate if _exists(candidate) else target)
    return {name for name in found if name != module}


def _exists(module: str) -> bool:
    path = PACKAGE.parent / Path(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def graph() -> dict[str, set[str]]:
    return {module_name(path): imports(path, module_name(path)) for path in PACKAGE.rglob("*.py")}


def test_no_import_runs_against_the_layers():
    wrong = []
    for module, targets in graph().items():
        rank, prefix = layer(module)
        for target in targets:
            other, other_prefix = layer(target)
            if other > rank or (other == rank and other_prefix != prefix):
                wrong.append(f"{module} (layer {rank}) imports {target} (layer {other})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_circle():
    edges = graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not circles, "\n".join(" -> ".join(circle) for circle in circles)


def test_transports_and_the_toolkit_know_nothing_of_prefect_or_the_run():
    offenders = []
    for folder in ("transports", "toolkit"):
        for path in (PACKAGE / folder).rglob("*.py"):
            text = path.read_text()
            for forbidden in ("import prefect", "from prefect", "_runtime"):
                if forbidden in text:
                    offenders.append(f"{path.relative_to(PACKAGE)}: {forbidden}")
    assert not offenders, "\n".join(offenders)


def test_the_top_floor_holds_only_what_a_user_meets():
    wingless = {path.stem for path in PACKAGE.glob("*.py")}
    assert wingless == TOP_FLOOR, f"put {sorted(wingless - TOP_FLOOR)} in a wing"
