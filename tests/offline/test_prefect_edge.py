"""Prefect's edge stays in one wing, with a ledger: outside ``nexusflow/_prefect/`` no module
imports a private Prefect module or name, touches a private attribute of a Prefect object,
builds a Prefect model with ``model_construct`` or patches a Prefect class; inside it, each
such use is an entry of ``nexusflow/_prefect/README.md``, whose entries each name a test that
exists. Read from the source (no import runs), best-effort: a private attribute counts when
its object's name came from Prefect (imported, annotated with a Prefect type, or made by a
Prefect call), and the private names Prefect objects are known by count on any object."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from paths import REPO

ROOT = REPO
PACKAGE = ROOT / "nexusflow"
WING = PACKAGE / "_prefect"
LEDGER = WING / "README.md"
PREFECT_PACKAGES = ("prefect", "prefect_dask", "prefect_aws")

KNOWN_PRIVATE = {"_block_document_id", "_set_intent", "_run_uvicorn_command", "_handle_batch", "_add_csrf_headers"}
"""Private attributes of Prefect objects that nexusflow uses, counted on any object: the
object's name does not always say that it is Prefect's (``http = client._client``)."""


@dataclass(frozen=True)
class Use:
    """One private use: where, and the name the ledger knows it by."""

    path: Path
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.name}"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain or call starts from: ``a`` for ``a.b.c()``."""
    while True:
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return node.id if isinstance(node, ast.Name) else None


def _names_in(node: ast.expr) -> set[str]:
    return {name.id for name in ast.walk(node) if isinstance(name, ast.Name)}


def _prefect_names(nodes: list[ast.AST]) -> tuple[set[str], list[tuple[int, str]]]:
    """The names bound to Prefect's modules and objects, and the private imports (line, name)."""
    names: set[str] = set()
    private: list[tuple[int, str]] = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PREFECT_PACKAGES:
            for alias in node.names:
                names.add(alias.asname or alias.name)
                if any(_private(part) for part in node.module.split(".")) or _private(alias.name):
                    private.append((node.lineno, f"{node.module}.{alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PREFECT_PACKAGES:
                    names.add(alias.asname or alias.name.split(".")[0])
                    if any(_private(part) for part in alias.name.split(".")):
                        private.append((node.lineno, alias.name))
    # Names that hold Prefect objects: parameters annotated with a Prefect type, and what a
    # Prefect call made (``x = get_client()``, ``async with get_client() as x``), to a fixpoint.
    binders = [node for node in nodes if isinstance(node, ast.arg | ast.Assign | ast.withitem)]
    while True:
        before = len(names)
        for node in binders:
            if isinstance(node, ast.arg) and node.annotation is not None and _names_in(node.annotation) & names:
                names.add(node.arg)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _root(node.value) in names:
                names.update(target.id for target in node.targets if isinstance(target, ast.Name))
            elif isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
                if _root(node.context_expr) in names:
                    names.add(node.optional_vars.id)
        if len(names) == before:
            return names, private


def private_uses(path: Path) -> list[Use]:
    """Every private Prefect import, private attribute of a Prefect object, ``model_construct``
    of a Prefect model and patch of a Prefect class in one module."""
    nodes = list(ast.walk(ast.parse(path.read_text())))
    names, imports = _prefect_names(nodes)
    found = [Use(path, line, name) for line, name in imports]
    for node in nodes:
        if isinstance(node, ast.Attribute):
            root = _root(node.value)
            if _private(node.attr) and (node.attr in KNOWN_PRIVATE or (root in names and root not in ("self", "cls"))):
                found.append(Use(path, node.lineno, node.attr))
            elif node.attr == "model_construct" and root in names:
                found.append(Use(path, node.lineno, f"{ast.unparse(node.value)}.model_construct"))
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    if target.value.id in names and target.value.id[:1].isupper():  # a Prefect class patched
                        found.append(Use(path, node.lineno, f"{target.value.id}.{target.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if node.args and _root(node.args[0]) in names:
                found.append(Use(path, node.lineno, f"setattr({ast.unparse(node.args[0])}, ...)"))
    found.extend(_inherited(path, nodes, names))
    return sorted(set(found), key=lambda use: (use.line, use.name))


def _inherited(path: Path, nodes: list[ast.AST], names: set[str]) -> list[Use]:
    """In a subclass of a Prefect class: ``self._x`` that the class does not define itself
    (Prefect's private method or attribute), and a private keyword passed to ``super()``'s."""
    found: list[Use] = []
    for cls in nodes:
        if not isinstance(cls, ast.ClassDef) or not any(_root(base) in names for base in cls.bases):
            continue
        own = {item.name for item in cls.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}
        own |= {
            node.attr
            for node in ast.walk(cls)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _root(node) == "self"
        }
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                if _private(node.attr) and node.attr not in own:
                    found.append(Use(path, node.lineno, node.attr))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if _root(node.func) == "super":
                    found.extend(Use(path, node.lineno, k.arg) for k in node.keywords if k.arg and _private(k.arg))
    return found


def _modules(inside: bool) -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if (WING in path.parents) == inside]


def test_no_private_prefect_use_outside_the_wing() -> None:
    outside = [str(use) for path in _modules(inside=False) for use in private_uses(path)]
    assert not outside, (
        "a private Prefect name outside nexusflow/_prefect/: move it into a function there, with"
        " its entry in nexusflow/_prefect/README.md:\n" + "\n".join(outside)
    )


def test_the_rule_sees_what_it_forbids(tmp_path: Path) -> None:
    """The detector finds each kind of use it is there to forbid (a rule that finds nothing
    passes for ever)."""
    module = tmp_path / "module.py"
    module.write_text(
        "from prefect._internal import control_listener\n"
        "from prefect.context import FlowRunContext, SyncClientContext\n"
        "from prefect.filesystems import WritableFileSystem\n"
        "from prefect.client.orchestration import get_client\n"
        "def f(storage: WritableFileSystem) -> None:\n"
        "    storage._block_document_id\n"
        "    context = FlowRunContext.get()\n"
        "    context._token\n"
        "    SyncClientContext.model_construct(client=None)\n"
        "    FlowRunContext.get = None\n"
        "async def g() -> None:\n"
        "    async with get_client() as client:\n"
        "        client._client\n"
        "    self._client\n"
        "class Store(WritableFileSystem):\n"
        "    def _mine(self) -> None:\n"
        "        self._kept = 1\n"
        "    def read(self) -> bytes:\n"
        "        self._mine()\n"
        "        self._kept\n"
        "        self._resolve_path('x')\n"
        "        return super().read_path('x', _sync=True)\n"
    )
    assert [use.name for use in private_uses(module)] == [
        "prefect._internal.control_listener",
        "_block_document_id",
        "_token",
        "SyncClientContext.model_construct",
        "FlowRunContext.get",
        "_client",
        "_resolve_path",
        "_sync",
    ]


LEDGER_TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+(?:::\w+)?)`")


def _tests_of(path: Path) -> set[str]:
    """``name`` and ``Class::name`` of every test function a test module defines."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef):
            found.update(
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
    return found


def _entries() -> list[str]:
    """The ledger's entries: each a ``### `` section."""
    return ["### " + part for part in LEDGER.read_text().split("\n### ")[1:]]


def test_every_ledger_entry_names_a_test_that_exists() -> None:
    entries = _entries()
    assert entries, "the ledger has no entries"
    for entry in entries:
        title = entry.splitlines()[0]
        for field in ("what it works around", "measured on", "upstream", "fails when Prefect changes it"):
            assert f"- {field}:" in entry, f"{title}: no '{field}' line"
        guards = LEDGER_TEST.findall(entry)
        assert guards, f"{title}: names no test as `tests/<folder>/test_x.py::test_name`"
        for file, name in guards:
            assert (ROOT / file).is_file(), f"{title}: {file} does not exist"
            assert name in _tests_of(ROOT / file), f"{title}: {file} defines no {name}"


def test_every_private_use_in_the_wing_is_in_the_ledger() -> None:
    ledger = LEDGER.read_text()
    missing = [
        str(use) for path in _modules(inside=True) for use in private_uses(path) if f"`{use.name}`" not in ledger
    ]
    assert not missing, "a private Prefect use with no entry in nexusflow/_prefect/README.md:\n" + "\n".join(missing)
