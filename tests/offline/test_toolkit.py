from pathlib import Path

import pytest

from nexusflow import FunctionTool, Toolkit, ToolkitError, tool
from nexusflow.config._env import expand
from nexusflow.errors import MissingVariableError


@tool
def add(a: int, b: int = 1) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number,
            one by default.
    """
    return a + b


@tool(name="echo_async", description="Echo back, asynchronously.")
async def echo(text: str, times: int = 1) -> list[str]:
    return [text] * times


@tool
def explode(reason: str) -> str:
    """Always raises."""
    raise ValueError(reason)


def test_schema_from_hints_and_docstring():
    spec = add.spec.function
    assert spec.name == "add"
    assert spec.description == "Add two integers."
    params = spec.parameters
    assert params["required"] == ["a"]
    assert params["properties"]["a"]["type"] == "integer"
    assert params["properties"]["a"]["description"] == "The first number."
    assert params["properties"]["b"]["description"] == "The second number, one by default."
    assert params["properties"]["b"]["default"] == 1
    assert params["additionalProperties"] is False


def test_decorated_function_is_still_callable():
    assert add(2, 3) == 5
    assert isinstance(add, FunctionTool)


@pytest.mark.anyio
async def test_calls_validate_and_render():
    kit = Toolkit([add, echo, explode])
    assert (await kit.call("add", '{"a": 2, "b": 3}')).content == "5"
    assert (await kit.call("add", {"a": "4"})).content == "5"
    result = await kit.call("echo_async", {"text": "hé", "times": 2})
    assert result.content == '["hé","hé"]' and not result.is_error


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("nope", "{}", 'error: unknown tool "nope" (available: add, echo_async, explode)'),
        ("add", '{"a": "x"}', 'error: invalid arguments for tool "add": a: Input should be a valid integer'),
        ("add", "{}", 'error: invalid arguments for tool "add": a: Field required'),
        ("add", '{"a": 1, "c": 2}', 'error: invalid arguments for tool "add": c: Extra inputs are not permitted'),
        ("add", "{not json", 'error: invalid arguments for tool "add": not JSON'),
        ("add", "[1]", 'error: invalid arguments for tool "add": expected a JSON object, got list'),
        ("explode", '{"reason": "boom"}', 'error: tool "explode" raised ValueError: boom'),
    ],
)
async def test_model_mistakes_become_error_results(name, arguments, message):
    kit = Toolkit([add, echo, explode])
    result = await kit.call(name, arguments)
    assert result.is_error
    assert result.content.startswith(message)


@pytest.mark.anyio
async def test_plain_functions_are_wrapped():
    def greet(name: str) -> str:
        """Greet someone."""
        return f"hi {name}"

    async with await Toolkit.load(tools=[greet]) as kit:
        assert kit.names == ["greet"]
        assert (await kit.call("greet", {"name": "ann"})).content == "hi ann"


def test_duplicate_names_are_an_error():
    with pytest.raises(ToolkitError, match='two tools are named "add"'):
        Toolkit([add, FunctionTool(lambda a: a, name="add")])


def test_args_kwargs_cannot_be_tools():
    with pytest.raises(ToolkitError, match=r"\*args and \*\*kwargs"):
        tool(lambda *args: None)


def _skill(root: Path, folder: str, text: str) -> None:
    (root / folder).mkdir(parents=True)
    (root / folder / "SKILL.md").write_text(text, encoding="utf-8")


@pytest.mark.anyio
async def test_skills_are_listed_and_read_on_demand(tmp_path):
    _skill(tmp_path, "release", "---\nname: release\ndescription: How to cut a release.\n---\n# Release\nTag it.\n")
    _skill(tmp_path, "review", "---\nname: review\ndescription: Review a diff.\n---\nRead every line.\n")
    (tmp_path / "release" / "checklist.txt").write_text("1. bump\n")
    kit = await Toolkit.load(skills_dir=tmp_path)
    assert kit.names == ["skill"]
    assert "- release: How to cut a release." in kit.instructions
    assert "- review: Review a diff." in kit.instructions
    assert kit.specs()[0].function.parameters["properties"]["name"]["enum"] == ["release", "review"]
    body = await kit.call("skill", {"name": "release"})
    assert body.content.startswith("# Release\nTag it.")
    assert "checklist.txt" in body.content
    missing = await kit.call("skill", {"name": "deploy"})
    assert missing.is_error and "no skill named 'deploy'" in missing.content


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no front matter", "no front matter"),
        ("---\nname: x\n", "not closed"),
        ("---\nname: x\n---\nbody", "needs a string description"),
        ("---\n[unbalanced\n---\nbody", "not YAML"),
    ],
)
@pytest.mark.anyio
async def test_bad_skills_are_clear_errors(tmp_path, text, message):
    _skill(tmp_path, "bad", text)
    with pytest.raises(ToolkitError, match=message):
        await Toolkit.load(skills_dir=tmp_path)


@pytest.mark.anyio
async def test_missing_skills_dir(tmp_path):
    with pytest.raises(ToolkitError, match="is not a directory"):
        await Toolkit.load(skills_dir=tmp_path / "nope")


def test_variable_expansion(monkeypatch):
    monkeypatch.setenv("NF_TOKEN", "s3cret")
    assert expand("Bearer ${NF_TOKEN}") == "Bearer s3cret"
    assert expand("${NF_UNSET_VAR:-fallback}") == "fallback"
    monkeypatch.delenv("NF_UNSET_VAR", raising=False)
    with pytest.raises(MissingVariableError, match=r"environment variable \$\{NF_UNSET_VAR\} is not set"):
        expand("x ${NF_UNSET_VAR}")
