"""Every message nexusflow raises is written in an ``errors.py``: the hierarchy's
(``nexusflow/errors.py``) or a wing's (``nexusflow/transports/errors.py``, ...). No other
module builds an exception's message from text of its own (a literal, an f-string,
``str.format``, a concatenation, ``.replace``), but for ``AssertionError``, ``AttributeError``
in a module's ``__getattr__`` and ``ALLOWED``.

And each message lives beside its code: in the errors module of the lowest wing that uses it,
which every other user, on a floor above, may import. So a wing's errors module is imported
from its own wing, or from a wing above that shares one of its messages (``argument_wrong``
is config's, and the toolkit, the client and ``testing`` word a refused argument with it);
never from below; and each of its messages is used in its own wing. ``nexusflow/errors.py``
holds the classes, the messages whose lowest user is on the top floor (``client``,
``compose``, ``job``, ``messages``, or another message there), and ``describe`` and ``unwrap``
(which read any error, on every floor). No message is used by no module. Read from the source, so a branch
no test reaches counts."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

from test_layers import imported_from, layer, module_name

from paths import REPO

PACKAGE = REPO / "nexusflow"
ERRORS_MODULES = sorted(PACKAGE.rglob("errors.py"))
HIERARCHY = "nexusflow.errors"

ALLOWED: dict[tuple[str, str, str], str] = {
    # (module path, enclosing function, exception): why its text may stay where it is
    ("transports/acp/connection.py", "_dispatch", "ValueError"): (
        "caught on the next line and logged as why a malformed line from the agent is skipped; no error carries it"
    ),
    ("demo.py", "current_temperature", "ValueError"): (
        "the demo's weather tool is an example of a user's tool: its words are the example's, and the model reads"
        " them as the tool's error result"
    ),
}
"""Control flow that never reaches a user as an error. Besides these, ``AssertionError``
(an invariant) and ``AttributeError`` in a module's ``__getattr__`` (Python's wording)."""


def _sources() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if path.name != "errors.py")


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _exception_classes() -> set[str]:
    """Python's exceptions and every class of the package derived from one, by name."""
    known = {
        name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
    }
    classes = [
        node
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    ]
    grown = True
    while grown:
        grown = False
        for node in classes:
            if node.name not in known and any(_name(base) in known for base in node.bases):
                known.add(node.name)
                grown = True
    return known


EXCEPTIONS = _exception_classes()


_REWORDING = {"format", "join", "replace", "removeprefix", "removesuffix"}
"""Methods that put text of the caller's into a message: ``str(exc).replace("tools:", "--tools:")``
(``mapping.get("message", "")`` only reads one)."""


def is_text(node: ast.expr) -> bool:
    """Whether an expression writes text: a string literal, an f-string, or one of them
    formatted, joined, concatenated or substituted into something."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return is_text(node.left) or is_text(node.right)
    if isinstance(node, ast.BoolOp):
        return any(is_text(value) for value in node.values)
    if isinstance(node, ast.IfExp):
        return is_text(node.body) or is_text(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        rewords = node.func.attr in _REWORDING and any(is_text(arg) for arg in _arguments(node))
        return is_text(node.func.value) or rewords
    return False


def _arguments(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(keyword.value for keyword in call.keywords)]


def _factories(tree: ast.Module) -> set[str]:
    """The names a module imports from an errors module: a factory's arguments may be
    labels (``argument_wrong(where, argument, expected, value)``); its sentence is there."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "errors"
        for alias in node.names
        if alias.name not in EXCEPTIONS
    }


class _Finder(ast.NodeVisitor):
    def __init__(self, path: Path, tree: ast.Module) -> None:
        self.where = path.relative_to(PACKAGE).as_posix()
        self.factories = _factories(tree)
        self.scopes: list[str] = []
        self.exception_class = False
        self.found: list[str] = []
        self.checked: set[int] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append(node.name)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer = self.exception_class
        self.exception_class = node.name in EXCEPTIONS or any(_name(base) in EXCEPTIONS for base in node.bases)
        self.generic_visit(node)
        self.exception_class = outer

    def visit_Raise(self, node: ast.Raise) -> None:
        """What is raised: a call, or one of several (``a or B(...)``, ``B(...) if c else d``)."""
        pending = [node.exc] if node.exc is not None else []
        while pending:
            value = pending.pop()
            if isinstance(value, ast.BoolOp):
                pending.extend(value.values)
            elif isinstance(value, ast.IfExp):
                pending.extend((value.body, value.orelse))
            elif isinstance(value, ast.Call) and _name(value.func) not in self.factories:
                self._check(value, raised=True)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        """An exception built anywhere (``return CliError(...)``, ``close(AcpError(...))``), or
        an exception class's own ``super().__init__(...)``."""
        callee = _name(node.func)
        if id(node) not in self.checked and (callee in EXCEPTIONS or (self.exception_class and callee == "__init__")):
            self._check(node, raised=False)
        self.generic_visit(node)

    def _check(self, call: ast.Call, raised: bool) -> None:
        self.checked.add(id(call))
        callee = _name(call.func) or ast.unparse(call.func)
        function = self.scopes[-1] if self.scopes else "<module>"
        if not any(is_text(arg) for arg in _arguments(call)):
            return
        if callee == "AssertionError" or (callee == "AttributeError" and self.scopes == ["__getattr__"]):
            return
        if (self.where, function, callee) in ALLOWED:
            return
        what = "raise" if raised else "builds"
        self.found.append(
            f"nexusflow/{self.where}:{call.lineno} ({function}) {what} {callee}(...) with a message of its own"
        )


def test_every_message_is_written_in_an_errors_module() -> None:
    found: list[str] = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        finder = _Finder(path, tree)
        finder.visit(tree)
        found += finder.found
    assert not found, "write these messages in the wing's errors.py, as a factory, or in a subclass:\n" + "\n".join(
        found
    )


def test_the_allowed_ones_are_still_there() -> None:
    """An entry whose raise is gone (moved, renamed) is dropped from ``ALLOWED``, not kept."""
    seen: set[tuple[str, str, str]] = set()
    for path in _sources():
        tree = ast.parse(path.read_text())
        where = path.relative_to(PACKAGE).as_posix()
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(function):
                    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                        seen.add((where, function.name, _name(node.exc.func) or ""))
    assert set(ALLOWED) <= seen, set(ALLOWED) - seen


def test_the_check_sees_each_way_of_writing_a_message() -> None:
    for source in (
        'raise CliError("cli: no")',
        'raise CliError(f"cli: {x}")',
        'raise CliError("cli: {}".format(x))',
        'raise CliError("cli: " + x)',
        'raise CliError(str(exc).replace("a", "b"))',
        'raise CliError(", ".join(names))',
        'raise self.closed or AcpError("acp: gone")',
        'raise failure(f"model: {x}")',
        'def f():\n    return HookError(name, TypeError(f"returned {x}"))',
        'class E(ValueError):\n    def __init__(self, x):\n        super().__init__(f"bad {x}")',
    ):
        tree = ast.parse(source)
        finder = _Finder(PACKAGE / "example.py", tree)
        finder.visit(tree)
        assert finder.found, source
    for source in (
        "raise CliError(str(exc)) from exc",
        'raise RemoteError(method, error.get("code"), str(error.get("message", "")))',
        "from .errors import argument_wrong\nraise argument_wrong(where, 'tools', 'a list', value)",
        'raise AssertionError("tenacity ends with a result")',
        'def __getattr__(name):\n    raise AttributeError(f"no {name}")',
        "raise",
        "raise exc",
    ):
        tree = ast.parse(source)
        finder = _Finder(PACKAGE / "example.py", tree)
        finder.visit(tree)
        assert not finder.found, source


READERS = {"describe", "unwrap"}
"""Not messages: they read any error (a group's one error, an error as its pinned message) and
are used on every floor from Prefect's edge up, so they stay with the hierarchy."""


def _wing(module: str) -> str | None:
    """The wing a module is in (``nexusflow.transports``); None on the top floor."""
    prefix = layer(module)[1]
    return prefix if prefix != "nexusflow" and (PACKAGE.parent / Path(*prefix.split("."))).is_dir() else None


def _messages() -> dict[tuple[str, str], set[str]]:
    """Each function of each errors module, by (module, name), with the modules that use it:
    those importing it, and the errors module itself where another of its functions or
    classes calls it."""
    users: dict[tuple[str, str], set[str]] = {}
    for path in ERRORS_MODULES:
        module = module_name(path)
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                users[(module, node.name)] = set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                for name in ast.walk(node):
                    if isinstance(name, ast.Name) and name.id != node.name and (module, name.id) in users:
                        users[(module, name.id)].add(module)
    for path in PACKAGE.rglob("*.py"):
        module = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = imported_from(path, module, node)
                for alias in node.names:
                    if (target, alias.name) in users:
                        users[(target, alias.name)].add(module)
    return users


def test_each_wing_has_one_errors_module_at_its_root() -> None:
    """``nexusflow/transports/errors.py``, never ``nexusflow/transports/acp/errors.py``: one
    place per wing to look for its words."""
    misplaced = [
        module
        for module in map(module_name, ERRORS_MODULES)
        if module != HIERARCHY and (_wing(module) is None or module != f"{_wing(module)}.errors")
    ]
    assert not misplaced, misplaced


def test_no_message_is_dead() -> None:
    dead = sorted(f"{module}.{name}" for (module, name), users in _messages().items() if not users)
    assert not dead, "no module uses these: delete them\n" + "\n".join(dead)


def test_a_wings_errors_module_is_imported_from_its_wing_or_above() -> None:
    wrong = []
    for (module, name), users in _messages().items():
        if module == HIERARCHY:
            continue
        for user in users:
            if _wing(user) != _wing(module) and layer(user)[0] <= layer(module)[0]:
                wrong.append(f"{user} imports {name} from {module}, a wing above or beside it")
    assert not wrong, "\n".join(sorted(wrong))


def test_each_message_lives_in_the_lowest_wing_that_uses_it() -> None:
    misplaced = []
    for (module, name), users in _messages().items():
        if not users or name in READERS:
            continue
        lowest = min(layer(user)[0] for user in users)
        wings = {_wing(user) for user in users if layer(user)[0] == lowest}
        if module != HIERARCHY:
            if _wing(module) not in {_wing(user) for user in users}:
                misplaced.append(f"{module}.{name}: its own wing uses it no more; move it up to its users'")
            continue
        if None not in wings and len(wings) == 1:
            misplaced.append(f"{module}.{name}: move it to {wings.pop()}.errors")
    assert not misplaced, "\n".join(sorted(misplaced))
