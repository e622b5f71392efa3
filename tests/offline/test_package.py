"""The package as installed: what importing it loads, its deprecated names, its declared
dependencies and what the wheel ships."""

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
import warnings
import zipfile
from importlib import import_module
from pathlib import Path
from types import ModuleType

import pytest

import nexusflow
import nexusflow.testing
import nexusflow.testing.server

from paths import REPO

ROOT = REPO
PACKAGE = ROOT / "nexusflow"


def fresh(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_importing_nexusflow_does_not_load_the_testing_helpers() -> None:
    fresh("import nexusflow, sys; assert 'nexusflow.testing' not in sys.modules, 'nexusflow.testing loaded'")


def test_the_scripted_model_and_the_demo_do_not_load_the_server() -> None:
    """The server needs the ``testing`` extra; ``nexusflow demo`` runs on the core install."""
    fresh(
        "import sys, nexusflow.demo; from nexusflow.testing import ScriptedModel, follow_prompt;"
        " assert 'nexusflow.testing.server' not in sys.modules, 'server loaded'"
    )


def test_the_server_names_load_on_first_use() -> None:
    from nexusflow.testing import Recorded, ScriptedModelServer, ScriptedReply

    assert ScriptedModelServer is nexusflow.testing.server.ScriptedModelServer
    assert ScriptedReply is nexusflow.testing.server.ScriptedReply
    assert Recorded is nexusflow.testing.server.Recorded
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        nexusflow.testing.Nothing  # noqa: B018


@pytest.mark.parametrize(
    ("module", "name", "replacement"),
    [
        (nexusflow, "ScriptedModel", nexusflow.testing.ScriptedModel),
        (nexusflow, "follow_prompt", nexusflow.testing.follow_prompt),
        (nexusflow.testing, "Reply", nexusflow.testing.server.ScriptedReply),
        (nexusflow.testing.server, "Reply", nexusflow.testing.server.ScriptedReply),
    ],
)
def test_deprecated_names_still_work_and_warn(module: ModuleType, name: str, replacement: object) -> None:
    with pytest.warns(DeprecationWarning, match=r"deprecated; (use ScriptedReply|import it from nexusflow\.testing)"):
        assert getattr(module, name) is replacement


def test_the_job_entry_point_of_0_1_still_loads_the_job_flow_and_warns() -> None:
    """Deployments made from the 0.1 README name ``nexusflow.flows.job:agent_job``."""
    from prefect.flows import load_flow_from_entrypoint

    from nexusflow.job import agent_job

    with pytest.warns(DeprecationWarning, match=r"use nexusflow\.job:agent_job"):
        assert load_flow_from_entrypoint("nexusflow.flows.job:agent_job") is agent_job
    with pytest.raises(AttributeError, match="no attribute 'other'"):
        import_module("nexusflow.flows.job").other  # noqa: B018


def test_current_names_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from nexusflow.testing import ScriptedModel, ScriptedReply, follow_prompt  # noqa: F401


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots - set(sys.stdlib_module_names) - {"nexusflow"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_every_imported_distribution_is_declared() -> None:
    """Core modules import only ``dependencies``; ``nexusflow/testing`` may also use its extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _names(project["dependencies"])
    testing = core | _names(project["optional-dependencies"]["testing"])
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        declared = testing if "testing" in path.relative_to(PACKAGE).parts else core
        for root in sorted(_imported_roots(path)):
            if not {d.lower().replace("_", "-") for d in distributions.get(root, [root])} & declared:
                missing.append(f"{path.relative_to(ROOT)}: {root}")
    assert not missing


@pytest.mark.slow
def test_the_wheel_ships_py_typed(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("nexusflow-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "nexusflow/py.typed" in names
    assert "nexusflow/testing/server/core.py" in names


@pytest.mark.slow
def test_importing_nexusflow_does_not_import_prefect():
    """The command's --help and a user's import stay fast: public names load on first use."""
    import subprocess
    import sys

    code = (
        "import sys, nexusflow\n"
        "assert 'prefect' not in sys.modules, 'prefect was imported'\n"
        "missing = [name for name in nexusflow.__all__ if getattr(nexusflow, name, None) is None]\n"
        "assert not missing, missing\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_a_client_loads_no_mcp_sdk_until_a_run_uses_mcp() -> None:
    """The MCP SDK costs ~0.4 s to import; only an MCP toolkit or an ACP run's served toolkit
    needs it, and they import it when they start."""
    fresh(
        "import sys; from nexusflow import create_cli_client, create_in_process_client, Toolkit, CliStyles;"
        " import nexusflow.transports.acp.transport, nexusflow.transports.acp.bridge;"
        " loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'uvicorn'));"
        " assert not loaded, loaded"
    )


@pytest.mark.slow
def test_an_in_process_client_loads_neither_cli_nor_acp_transport() -> None:
    """An in-process model needs neither agent-CLI transport (about 25 ms of imports):
    ``create_cli_client`` lives apart from the client and brings them."""
    fresh(
        "import sys; from nexusflow import create_in_process_client, Toolkit, tool;"
        " prefixes = ('nexusflow.transports.oneshot', 'nexusflow.transports.acp');"
        " loaded = sorted(m for m in sys.modules if m.startswith(prefixes));"
        " assert not loaded, loaded;"
        " from nexusflow import create_cli_client;"
        " assert 'nexusflow.transports.acp.transport' in sys.modules, 'create_cli_client without its transports'"
    )


def test_the_names_type_checkers_see_are_the_public_ones() -> None:
    """``__all__`` and the lazy loading come from one list, ``_PUBLIC``; the ``TYPE_CHECKING``
    imports cannot (a type checker does not run code), so they are kept to it here: the same
    names, from the same modules, plus the deprecated ones that moved to ``nexusflow.testing``."""
    source = ast.parse((PACKAGE / "__init__.py").read_text())
    (block,) = [node for node in source.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    seen = {
        alias.name: (node.module or "")
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    }
    assert len(seen) == sum(len(node.names) for node in block.body if isinstance(node, ast.ImportFrom))
    moved = dict.fromkeys(nexusflow._MOVED_TO_TESTING, "testing")
    assert seen == nexusflow._WHERE | moved
    assert sorted(nexusflow.__all__) == sorted(nexusflow._WHERE)
