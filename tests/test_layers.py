"""Imports run one way: the command and the client over flows, flows over tasks, tasks over
transports and the toolkit, those over messages, messages over errors; and no module imports
itself back through others, ``TYPE_CHECKING`` and function-level imports included. Read from
the source (no import runs), so a circle hidden behind ``TYPE_CHECKING`` counts."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "nexusflow"

LAYERS: list[tuple[int, tuple[str, ...]]] = [
    (15, ("nexusflow.__main__",)),
    (14, ("nexusflow.command",)),
    (13, ("nexusflow",)),
    (12, ("nexusflow.demo", "nexusflow.job")),
    (11, ("nexusflow.testing",)),
    (10, ("nexusflow.cli_client",)),
    (9, ("nexusflow.client",)),
    (8, ("nexusflow.flows", "nexusflow.compose", "nexusflow.sessions", "nexusflow.alerts")),
    (7, ("nexusflow.tasks", "nexusflow._runtime", "nexusflow._lease", "nexusflow.waits")),
    (6, ("nexusflow.transports", "nexusflow.options")),
    (5, ("nexusflow.toolkit", "nexusflow._locks", "nexusflow.budget")),
    (4, ("nexusflow.memory",)),
    (
        3,
        (
            "nexusflow._position",
            "nexusflow._artifact_keys",
            "nexusflow._clients",
            "nexusflow._storage",
            "nexusflow._storage_tree",
            "nexusflow._concurrency",
            "nexusflow._retry",
            "nexusflow._server",
            "nexusflow._checks",
            "nexusflow.hooks",
            "nexusflow.subscription",
            "nexusflow.output",
            "nexusflow.policies",
            "nexusflow.suspension",
            "nexusflow.events",
            "nexusflow._env",
            "nexusflow._imports",
            "nexusflow.task_config",
            "nexusflow.settings",
        ),
    ),
    (2, ("nexusflow.messages",)),
    (1, ("nexusflow.errors", "nexusflow._launches")),
    (0, ("nexusflow._secrets", "nexusflow._digest", "nexusflow._liveness")),
]
"""Higher layers may import lower ones; a module may import its own layer only within its
own package (``nexusflow.tasks.turn`` -> ``nexusflow.tasks.keys``). ``agent_job`` is a flow
over the client (a deployment's job builds one), so it sits above it."""


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


def imports(path: Path, module: str) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("nexusflow"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
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
