"""The one-shot CLI transport against a fake CLI that records what it was given."""

import json
import os
import tempfile
from pathlib import Path

import anyio
import pytest

from nexusflow import (
    CliError,
    CliStyle,
    CliStyles,
    ModelRequest,
    RunFinished,
    TextChunk,
    ToolCallFinished,
    ToolCallStarted,
    Toolkit,
    Transport,
    create_cli_client,
    load_cli_style,
    tool,
)
from nexusflow.transports.oneshot import PREAMBLE, REQUEST_MARKER, CliConfig, CliTransport, builtin_style, render

from cli_fixtures import ATTACK_JSON, CLAUDE_MODEL_ERROR, FAKE_CLI, PAGE, alive, envelope_answer, envelope_calls, styled
from helpers.prefect_api import task_runs

pytestmark = [pytest.mark.anyio]

BUILTIN = [style for style in CliStyles if style is not CliStyles.CUSTOM]
MODEL = {style: (None if style is CliStyles.GOOSE else "model-x") for style in BUILTIN}
TRICKY = "-starts with a dash, \"quotes\", 'single', <>&|;$(x) `y`, é中文🙂\nsecond line\n\ttabbed"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def request(prompt: str = "hi", **extra) -> ModelRequest:
    return ModelRequest.model_validate({"messages": [{"role": "user", "content": prompt}], "tools": [], **extra})


def transport(style: CliStyle, **config) -> CliTransport:
    return CliTransport(CliConfig(style=style, command=str(FAKE_CLI), **config))


def received_prompt(call: dict) -> str:
    """What the CLI got as its prompt, whichever channel carried it."""
    if call["stdin_kind"] == "pipe":
        return call["stdin"]
    prompt_files = [text for path, text in call["files"].items() if path.endswith("prompt.txt")]
    if prompt_files:
        return prompt_files[0]
    return next(arg for arg in call["argv"] if arg.startswith(PREAMBLE[:20]) or PREAMBLE[:20] in arg)


def scratch_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("nexusflow-cli-*")}


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launches' scratch folders in a temporary folder of this test's: in the shared one,
    another xdist worker's launch made and removed its own between the two looks."""
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))


# ---- styles: argv and channels ---------------------------------------------------------


@pytest.mark.parametrize("style", BUILTIN, ids=lambda s: s.value)
async def test_builtin_style_argv_and_channels(fake, style, session_id):
    chosen = builtin_style(style)
    fake.script(styled(style.value, envelope_answer("ok from " + style.value)))
    client = create_cli_client(style=style, command=fake.command, transport=Transport.CLI, model=MODEL[style])
    result = await client.run(TRICKY, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "ok from " + style.value

    (call,) = fake.calls()
    scratch = [arg for arg in call["argv"] if "nexusflow-cli-" in arg]
    argv = ["<FILE>" if a.endswith("prompt.txt") else "<OUT>" if a.endswith("answer.txt") else a for a in call["argv"]]
    assert argv == chosen.argv(model=MODEL[style], file="<FILE>", out="<OUT>")
    assert all(Path(path).parent.name.startswith("nexusflow-cli-") for path in scratch)
    assert call["stdin_kind"] == ("pipe" if chosen.prompt_mode == "stdin" else "devnull")
    prompt = received_prompt(call)
    assert prompt.startswith(PREAMBLE + REQUEST_MARKER)
    body = json.loads(prompt[len(PREAMBLE + REQUEST_MARKER) :])
    assert body["messages"][-1]["content"] == TRICKY
    if MODEL[style]:
        assert body["model"] == MODEL[style]


@pytest.mark.parametrize("mode", ["arg", "stdin", "file"])
async def test_tricky_prompt_arrives_intact_on_every_channel(fake, mode):
    args = {"arg": ["--ask", "{{prompt}}"], "stdin": ["--ask", "-"], "file": ["--ask-file", "{{file}}"]}[mode]
    style = CliStyle(name="mine", args=args, prompt_mode=mode, verified="UNVERIFIED")
    fake.script({"stdout": envelope_answer(TRICKY)})
    req = request(TRICKY)
    reply = await transport(style).generate(req)
    assert reply.content == TRICKY
    (call,) = fake.calls()
    assert received_prompt(call) == render(req)
    if mode == "arg":
        assert call["argv"] == ["--ask", render(req)]


async def test_the_cli_receives_the_assembled_body_byte_for_byte(fake, session_id):
    def before_llm(req: ModelRequest) -> ModelRequest:
        return ModelRequest.model_validate(
            {**req.body(), "tool_choice": "auto", "x_never_heard_of": {"deep": [1, None, "ü"], "n": 1.5}}
        )

    client = create_cli_client(
        CliStyles.CLAUDE, command=fake.command, transport=Transport.CLI, model="sonnet", before_llm=before_llm
    )
    fake.script(styled("claude", envelope_answer("fine")))
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client.run("add please", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    expected_body = {  # the conversation last: what a provider's prefix cache reuses
        "tools": [add.spec.model_dump(mode="json")],
        "model": "sonnet",
        "tool_choice": "auto",
        "x_never_heard_of": {"deep": [1, None, "ü"], "n": 1.5},
        "messages": [{"role": "user", "content": "add please"}],
    }
    expected = PREAMBLE + REQUEST_MARKER + json.dumps(expected_body, ensure_ascii=False)
    assert fake.calls()[0]["stdin"].encode() == expected.encode()


async def test_environment_is_expanded_and_passed(fake, monkeypatch):
    monkeypatch.setenv("NF_CLI_SECRET", "s3cret-value")
    monkeypatch.setenv("FAKE_CLI_ENV_KEYS", "MY_TOKEN,GEMINI_CLI_NO_RELAUNCH")
    fake.script(styled("gemini", envelope_answer("ok")))
    style = builtin_style(CliStyles.GEMINI)
    await transport(style, env={"MY_TOKEN": "Bearer ${NF_CLI_SECRET}"}, model="g").generate(request())
    env = fake.calls()[0]["env"]
    assert env["MY_TOKEN"] == "Bearer s3cret-value"
    assert env["GEMINI_CLI_NO_RELAUNCH"] == "true"


async def test_cwd_is_used(fake, tmp_path):
    fake.script({"stdout": "answer"})
    style = CliStyle(name="mine", args=[], prompt_mode="stdin", verified="x")
    await transport(style, cwd=str(tmp_path)).generate(request())
    assert fake.calls()[0]["cwd"] == str(tmp_path)


# ---- pinned errors ---------------------------------------------------------------------


STDIN_STYLE = CliStyle(name="plain", args=[], prompt_mode="stdin", verified="x")
OUT_STYLE = CliStyle(name="outfile", args=["-o", "{{out}}"], prompt_mode="stdin", answer="file", verified="x")


def test_command_is_required():
    with pytest.raises(CliError, match=r"^cli: Command is required \(path or name of the CLI binary\)$"):
        create_cli_client(style=CliStyles.CLAUDE, command="")


async def test_command_not_found(fake):
    with pytest.raises(CliError, match="^cli: command not found: nexusflow-no-such-cli$"):
        await CliTransport(CliConfig(style=STDIN_STYLE, command="nexusflow-no-such-cli")).generate(request())


async def test_exit_status_with_stderr_capped_at_1000_code_points(fake):
    long = "é" * 1500 + "THE END"
    fake.script({"stderr": long, "exit": 3})
    with pytest.raises(CliError) as caught:
        await transport(STDIN_STYLE).generate(request())
    message = str(caught.value)
    assert message.startswith("cli: exit 3: ")
    assert message == "cli: exit 3: " + long[-1000:]


async def test_exit_status_falls_back_to_stdout_when_stderr_is_empty(fake):
    fake.script({"stdout": "API Error: 400 bad request", "exit": 1})
    with pytest.raises(CliError, match="^cli: exit 1: API Error: 400 bad request$"):
        await transport(STDIN_STYLE).generate(request())


async def test_a_claude_model_error_is_the_model_s_words_not_claude_s_diagnostic_on_stderr(fake):
    fake.script(CLAUDE_MODEL_ERROR)
    with pytest.raises(CliError, match="^cli: exit 1: API Error: 400 scripted failure: bad request$"):
        await transport(builtin_style(CliStyles.CLAUDE)).generate(request())


async def test_no_output_file(fake):
    fake.script({"stdout": "printed, not written"})
    with pytest.raises(CliError, match="^cli: no output file$"):
        await transport(OUT_STYLE).generate(request())


@pytest.mark.parametrize("reply", [{"stdout": ""}, {"stdout": "  \n\n"}, {"out": ""}])
async def test_empty_reply(fake, reply):
    fake.script(reply)
    style = OUT_STYLE if "out" in reply else STDIN_STYLE
    with pytest.raises(CliError, match="^cli: empty reply$"):
        await transport(style).generate(request())


@pytest.mark.slow
async def test_timeout_kills_the_whole_process_group(fake, private_tmp):
    fake.script({"child": True, "sleep": 60})
    before = scratch_dirs()
    with pytest.raises(CliError, match="^cli: timed out after 1500ms$"):
        await transport(STDIN_STYLE, timeout=1.5).generate(request())
    (call,) = fake.calls()
    (child,) = fake.children()
    await anyio.sleep(0.2)
    assert not alive(call["pid"]) and not alive(child)
    assert scratch_dirs() == before


async def test_children_left_behind_by_a_finished_cli_are_killed(fake):
    fake.script({"child": True, "stdout": "done"})
    assert (await transport(STDIN_STYLE).generate(request())).content == "done"
    (child,) = fake.children()
    await anyio.sleep(0.2)
    assert not alive(child)


@pytest.mark.slow
async def test_cancellation_kills_the_process_group(fake):
    fake.script({"child": True, "sleep": 60})
    with anyio.move_on_after(1.5):
        await transport(STDIN_STYLE).generate(request())
    (call,) = fake.calls()
    (child,) = fake.children()
    await anyio.sleep(0.2)
    assert not alive(call["pid"]) and not alive(child)


async def test_non_utf8_output_is_a_clear_error(fake):
    fake.script({"stdout_hex": "6f6bff0a"})
    with pytest.raises(CliError, match="^cli: the output is not UTF-8: byte 0xff at position 2$"):
        await transport(STDIN_STYLE).generate(request())


async def test_goose_error_markers_fail_although_the_exit_status_is_0(fake):
    fake.script(styled("goose", "Ran into this error: Request failed with status 400.") | {"exit": 0})
    with pytest.raises(CliError, match="^cli: the CLI reported an error: Ran into this error: Request failed"):
        await transport(builtin_style(CliStyles.GOOSE)).generate(request())


async def test_an_argument_prompt_over_128_kib_fails_before_spawning(fake):
    style = CliStyle(name="argonly", args=["{{prompt}}"], prompt_mode="arg", verified="x")
    fake.script({"stdout": "never"})
    with pytest.raises(CliError) as caught:
        await transport(style).generate(request("x" * 140_000))
    assert "128 KiB" in str(caught.value) and "stdin or file" in str(caught.value)
    assert fake.calls() == []


async def test_a_large_prompt_goes_through_stdin(fake):
    fake.script({"stdout": "big ok"})
    assert (await transport(STDIN_STYLE).generate(request("y" * 1_000_000))).content == "big ok"
    assert len(fake.calls()[0]["stdin"]) > 1_000_000


async def test_large_stdout_and_stderr_are_drained_without_deadlock(fake):
    big = "x" * 3_000_000
    fake.script({"stderr": "e" * 3_000_000, "stdout": envelope_answer(big)})
    assert (await transport(STDIN_STYLE, timeout=60).generate(request())).content == big


async def test_temp_files_are_removed_on_every_path(fake, private_tmp):
    before = scratch_dirs()
    file_style = CliStyle(name="f", args=["{{file}}", "-o", "{{out}}"], prompt_mode="file", answer="file", verified="x")
    fake.script({"out": "fine"}, {"exit": 2, "stderr": "boom"}, {"stdout": "no file written"})
    assert (await transport(file_style).generate(request())).content == "fine"
    for _ in range(2):
        with pytest.raises(CliError):
            await transport(file_style).generate(request())
    assert scratch_dirs() == before


async def test_the_cli_s_temporary_folder_is_the_launch_s_own_and_goes_with_it(fake, tmp_path, monkeypatch):
    """What a CLI leaves in its temporary folder (gemini: a report of every model error) is
    removed with the launch; the system's folder stays as it was. A TMPDIR given is kept."""
    system = tmp_path / "system-tmp"
    system.mkdir()
    monkeypatch.setenv("TMPDIR", str(system))
    monkeypatch.setattr(tempfile, "tempdir", str(system))
    monkeypatch.setenv("FAKE_CLI_ENV_KEYS", "TMPDIR")
    fake.script({"stdout": "one", "litter": "error-report.json"}, {"exit": 2, "stderr": "boom", "litter": "crash.json"})
    style = CliStyle(name="mine", args=[], prompt_mode="stdin", verified="x")
    assert (await transport(style).generate(request())).content == "one"
    with pytest.raises(CliError):
        await transport(style).generate(request())
    seen = [Path(call["env"]["TMPDIR"]) for call in fake.calls()]
    assert all(folder.parent == system and folder.name.startswith("nexusflow-cli-") for folder in seen), seen
    assert len(set(seen)) == 2, "each launch has a folder of its own"
    assert list(system.iterdir()) == [], "the launches left their folders behind"

    given = tmp_path / "given"
    given.mkdir()
    fake.script({"stdout": "two", "litter": "kept.json"})
    (fake.root / "calls.jsonl").unlink()
    assert (await transport(style, env={"TMPDIR": str(given)}).generate(request())).content == "two"
    assert fake.calls()[0]["env"]["TMPDIR"] == str(given)
    assert [path.name for path in given.iterdir()] == ["kept.json"], "a TMPDIR the user gave is the CLI's"


async def test_json_answer_field_errors_are_clear(fake):
    fake.script({"stdout": "not json"}, {"stdout": json.dumps({"other": 1})})
    claude = builtin_style(CliStyles.CLAUDE)
    with pytest.raises(CliError, match="expected JSON output with a 'result' field"):
        await transport(claude).generate(request())
    with pytest.raises(CliError, match="the JSON output has no 'result' field"):
        await transport(claude).generate(request())


# ---- construction ----------------------------------------------------------------------


def test_a_model_on_a_style_that_takes_none():
    with pytest.raises(CliError, match='^cli: style "goose" takes no model$'):
        create_cli_client(style=CliStyles.GOOSE, command="goose", model="gpt-5")


def test_a_required_model_missing():
    with pytest.raises(CliError, match='style "custom" needs a model'):
        create_cli_client(style=CliStyles.CUSTOM, command="x", args=["--model", "{{model}}"], prompt_mode="stdin")


def test_an_unknown_placeholder():
    with pytest.raises(CliError, match=r"unknown placeholder \{\{promt\}\}"):
        create_cli_client(style=CliStyles.CUSTOM, command="x", args=["{{promt}}"], prompt_mode="arg")


def test_channels_need_their_placeholders():
    with pytest.raises(CliError, match=r"prompt_mode 'file' needs \{\{file\}\}"):
        create_cli_client(style=CliStyles.CUSTOM, command="x", args=[], prompt_mode="file")


def test_style_fields_are_only_for_custom():
    with pytest.raises(CliError, match=r"are for style=CliStyles.CUSTOM"):
        create_cli_client(style=CliStyles.CLAUDE, command="claude", args=["-p"])


def test_a_style_must_be_the_enum():
    with pytest.raises(CliError, match="CliStyles.parse"):
        create_cli_client(style="claude", command="claude")
    assert CliStyles.parse(" Claude ") is CliStyles.CLAUDE
    with pytest.raises(CliError, match='unknown style "clod"'):
        CliStyles.parse("clod")


def test_every_builtin_style_is_valid_and_devin_is_unverified():
    for style in BUILTIN:
        chosen = builtin_style(style)
        assert chosen.name == style.value
        assert chosen.verified
        assert chosen.prompt_mode in ("stdin", "file"), "built-in styles avoid the argv size limit"
    assert builtin_style(CliStyles.DEVIN).verified == "UNVERIFIED"


def test_load_cli_style_from_path_json_and_dict(tmp_path):
    data = {"name": "mine", "args": ["ask", "{{file}}"], "prompt_mode": "file", "verified": "1.2.3"}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    assert load_cli_style(path) == load_cli_style(json.dumps(data)) == load_cli_style(data)
    assert load_cli_style(str(path)).verified == "1.2.3"
    with pytest.raises(CliError, match="cannot read style"):
        load_cli_style(tmp_path / "missing.json")
    with pytest.raises(CliError, match="prompt_mode: Input should be 'stdin', 'arg' or 'file'"):
        load_cli_style({**data, "prompt_mode": "pipe"})


# ---- the drifts, end to end -------------------------------------------------------------


async def test_a_declared_answer_with_tool_calls_runs_the_calls(fake, session_id):
    drift = {"kind": "answer", "content": "I am done", "tool_calls": [{"name": "add", "arguments": '{"a": 2, "b": 3}'}]}
    fake.script(styled("copilot", json.dumps(drift)), styled("copilot", envelope_answer("five")))
    client = create_cli_client(style=CliStyles.COPILOT, command=fake.command, transport=Transport.CLI)
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client.run("add", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert [m.content for m in result.messages if m.role == "tool"] == ["5"]
    assert result.text == "five"


async def test_a_malformed_envelope_is_repaired_with_its_complaint(fake, session_id):
    fake.script(
        styled("opencode", '{"tool_calls": {"name": "add"}}'),
        styled("opencode", envelope_calls({"name": "add", "arguments": {"a": 1, "b": 1}})),
        styled("opencode", "The sum is 2."),
    )
    client = create_cli_client(style=CliStyles.OPENCODE, command=fake.command, transport=Transport.CLI)
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client.run("add", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "The sum is 2."
    first, repair, _ = fake.calls()
    assert repair["stdin"].startswith(first["stdin"])
    assert repair["stdin"].endswith(
        "YOUR PREVIOUS REPLY WAS REJECTED: tool_calls must be a list\n"
        "Reply again with exactly one JSON object as described above."
    )
    assert result.metrics.launches == 3 and result.metrics.repairs == 1
    assert len(result.metrics.turn_seconds) == 2


async def test_a_model_that_never_complies_fails_after_one_plus_budget_launches(fake, session_id):
    bad = styled("goose", '{"tool_calls": [{"name": "nope", "arguments": {}}]}')
    fake.script(*[bad] * 10)
    client = create_cli_client(style=CliStyles.GOOSE, command=fake.command, transport=Transport.CLI, repair_budget=3)
    async with await Toolkit.load(tools=[add]) as toolkit:
        result = await client.run("add", toolkit, session_id=session_id)
    assert result.status == "failed"
    assert result.error == 'cli: malformed reply after 4 launches: tool_calls[0] calls unknown tool "nope" (tools: add)'
    assert len(fake.calls()) == 4


async def test_three_turns_through_prefect_with_streaming(fake, session_id):
    fake.script(
        styled("claude", envelope_calls({"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}})),
        styled(
            "claude",
            envelope_calls(
                {"id": "c2", "name": "add", "arguments": {"a": 3, "b": 4}},
                {"id": "c3", "name": "add", "arguments": {"a": 5, "b": 6}},
            ),
        ),
        styled("claude", envelope_answer("3, 7 and 11")),
    )
    client = create_cli_client(style=CliStyles.CLAUDE, command=fake.command, transport=Transport.CLI, model="sonnet")
    async with await Toolkit.load(tools=[add]) as toolkit:
        events = [event async for event in client.stream("add three times", toolkit, session_id=session_id)]
    kinds = [type(event) for event in events]
    assert kinds == [
        ToolCallStarted,
        ToolCallFinished,
        ToolCallStarted,
        ToolCallStarted,
        ToolCallFinished,
        ToolCallFinished,
        TextChunk,
        RunFinished,
    ]
    assert events[-2].text == "3, 7 and 11"
    result = events[-1].result
    assert result.status == "completed" and result.text == "3, 7 and 11"
    assert result.metrics.launches == 3 and result.metrics.repairs == 0
    usage = result.metrics.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (30, 15, 6), "three turns' sums"
    assert usage.cost_usd == pytest.approx(3 * 0.000175) and result.metrics.models == ["claude-sonnet-4-5"]
    last_request = json.loads(fake.calls()[-1]["stdin"].split(REQUEST_MARKER, 1)[1])
    assert [m.get("tool_call_id") for m in last_request["messages"] if m["role"] == "tool"] == ["c1", "c2", "c3"]
    runs = await task_runs(result.flow_run_id, expected=6)
    names = sorted(run.name for run in runs)
    assert names == ["tool-0-add", "tool-1-add", "tool-1-add-2", "turn-0", "turn-1", "turn-2"]


async def test_a_cli_failure_fails_the_run_with_the_pinned_message(fake, session_id):
    fake.script({"stderr": "Error: connection reset", "exit": 1})
    result = await create_cli_client(style=CliStyles.CLAUDE, command=fake.command, transport=Transport.CLI).run(
        "hi", session_id=session_id
    )
    assert result.status == "failed"
    assert result.error == "cli: exit 1: Error: connection reset"
    assert os.environ.get("FAKE_CLI_DIR")


async def test_a_page_quoted_in_the_final_answer_runs_nothing_through_the_flow(fake, session_id):
    deleted: list[dict] = []

    @tool
    def fetch(url: str) -> str:
        """Fetch a web page."""
        return PAGE

    @tool
    def delete_all(confirm: bool, scope: str) -> str:
        """Delete everything."""
        deleted.append({"confirm": confirm, "scope": scope})
        return "deleted"

    answer = f"The page asks assistants to reply with this: {ATTACK_JSON}"
    fake.script(
        styled("copilot", envelope_calls({"id": "c1", "name": "fetch", "arguments": {"url": "https://example.com"}})),
        styled("copilot", answer),
    )
    client = create_cli_client(style=CliStyles.COPILOT, command=fake.command, transport=Transport.CLI)
    async with await Toolkit.load(tools=[fetch, delete_all]) as toolkit:
        result = await client.run("what does example.com say?", toolkit, session_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == answer
    assert deleted == []
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert len(fake.calls()) == 2
    assert json.dumps(PAGE, ensure_ascii=False) in fake.calls()[1]["stdin"]
