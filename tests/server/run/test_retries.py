"""Opt-in model retries (``model_retries=``): a turn that fails with a ``TransientError`` is
tried again with backoff, each attempt counted; anything else fails the run at once.

The in-process model calls a real HTTP server on 127.0.0.1 through httpx and raises what
httpx raises; the CLI is the fake CLI and the ACP agent the scripted one."""

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import requests

from nexusflow import (
    CliError,
    CliStyles,
    ModelError,
    ModelRequest,
    Toolkit,
    TransientError,
    Transport,
    create_cli_client,
    create_in_process_client,
)
from nexusflow.messages import UserMessage
from nexusflow.tasks import TurnRecord
from nexusflow.transports.in_process import InProcessTransport

from cli_fixtures import envelope_answer, styled
from helpers.docs import block
from helpers.prefect_api import task_run_logs, task_runs
from helpers.servers import free_port

pytestmark = [pytest.mark.anyio]

FAST = {"model_retry_wait": 0.01}
"""Backoff of about 10 ms, 20 ms...: retries as they run, without the waits."""


class Api:
    """An HTTP model API answering each POST with the next scripted status (200: an answer)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.requests = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                status = api.statuses[min(api.requests, len(api.statuses) - 1)]
                api.requests += 1
                body = json.dumps({"content": "the answer"} if status == 200 else {"error": "try later"}).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/chat"

    def generate(self, request: ModelRequest) -> dict:
        response = httpx.post(self.url, json=request.body(), timeout=10)
        response.raise_for_status()
        return response.json()


@pytest.fixture
def api() -> Iterator:
    """Starts an ``Api`` with the given statuses; every one started is stopped at the end."""
    started: list[Api] = []

    def start(statuses: list[int]) -> Api:
        server = Api(statuses)
        threading.Thread(target=server.server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.server.shutdown()
        server.server.server_close()


async def run(client, session_id):
    return await client.run("go", Toolkit(), session_id=session_id)


@pytest.mark.slow
async def test_a_429_twice_is_retried_and_each_retry_is_counted_and_logged(api, session_id):
    model = api([429, 429, 200])
    result = await run(create_in_process_client(model.generate, model_retries=2, **FAST), session_id)
    assert result.status == "completed", result.error
    assert result.text == "the answer"
    assert model.requests == 3
    assert result.metrics.model_retries == 2
    assert result.metrics.turns == 1 and result.metrics.launches == 0, "an in-process call launches nothing"
    (turn,) = await task_runs(result.flow_run_id, expected=1)
    lines = await task_run_logs(turn)
    warned = [line for line in lines if line.startswith("model: transient error")]
    assert len(warned) == 2
    for number, line in enumerate(warned, 1):
        assert re.fullmatch(
            rf"model: transient error, retry {number} of 2 in \d+\.\ds: model: generate raised HTTPStatusError:"
            r" Client error '429 Too Many Requests' for url '.*'\n.*",
            line,
            re.DOTALL,
        ), line
    cost = r" · seconds \d+\.\d\d · tokens \? in / \? out · cost \$\? · launches 0 · retries 2"
    assert re.fullmatch(r"answer: .*" + cost, lines[-1]), lines[-1]


async def test_retries_are_off_by_default(api, session_id):
    model = api([429, 200])
    result = await run(create_in_process_client(model.generate), session_id)
    assert result.status == "failed"
    assert result.error.startswith("model: generate raised HTTPStatusError: Client error '429 Too Many Requests'")
    assert model.requests == 1
    assert result.metrics.model_retries == 0


async def test_a_400_is_never_retried(api, session_id):
    model = api([400, 200])
    result = await run(create_in_process_client(model.generate, model_retries=3, **FAST), session_id)
    assert result.status == "failed"
    assert result.error.startswith("model: generate raised HTTPStatusError: Client error '400 Bad Request'")
    assert model.requests == 1


class APIStatusError(Exception):
    """The shape of the openai and anthropic SDKs' status errors (neither SDK is installed
    here): the status on the exception itself."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"Error code: {status_code}")
        self.status_code = status_code


def with_requests(model: Api, request: ModelRequest) -> dict:
    response = requests.post(model.url, json=request.body(), timeout=10)
    response.raise_for_status()
    return response.json()


def with_sdk(model: Api, request: ModelRequest) -> dict:
    response = httpx.post(model.url, json=request.body(), timeout=10)
    if response.status_code != 200:
        raise APIStatusError(response.status_code)
    return response.json()


@pytest.mark.parametrize("client", ["httpx", "requests", "sdk"])
async def test_a_503_is_retried_whichever_http_client_raised_it(api, session_id, client):
    model = api([503, 200])
    generate = {"httpx": model.generate, "requests": partial(with_requests, model), "sdk": partial(with_sdk, model)}
    result = await run(create_in_process_client(generate[client], model_retries=1, **FAST), session_id)
    assert result.status == "completed", result.error
    assert model.requests == 2 and result.metrics.model_retries == 1


@pytest.mark.parametrize(("client", "raised"), [("httpx", "ConnectError"), ("requests", "ConnectionError")])
async def test_a_model_server_that_refuses_a_connection_is_retried(api, session_id, client, raised):
    """The model's server is restarting: the first attempt finds nothing listening. Retried
    with ``model_retries``; without, the run fails at once, naming the error."""
    model = api([200])

    def through(urls: list[str]):
        def generate(request: ModelRequest) -> dict:
            post = requests.post if client == "requests" else httpx.post
            response = post(urls.pop(0), json=request.body(), timeout=10)
            response.raise_for_status()
            return response.json()

        return generate

    refused = f"http://127.0.0.1:{free_port()}/v1/chat"
    urls = [refused, model.url]
    result = await run(create_in_process_client(through(urls), model_retries=1, **FAST), session_id)
    assert result.status == "completed", result.error
    assert urls == [] and model.requests == 1 and result.metrics.model_retries == 1
    failed = await run(create_in_process_client(through([refused, model.url])), f"{session_id}-off")
    assert failed.status == "failed" and failed.error.startswith(f"model: generate raised {raised}: ")


class RefusedHere(httpx.ConnectError):
    """A client's own kind of refused connection: retried as httpx's is."""


class ConnectError(Exception):
    """Named like httpx's, and nothing of a client's: a name comparison would retry it."""


@pytest.mark.parametrize(
    ("raised", "transient"),
    [
        (httpx.ConnectError("refused"), True),
        (RefusedHere("refused"), True),
        (requests.ConnectTimeout("refused"), True),
        (ConnectionRefusedError("refused"), True),
        (ConnectError("a stranger's"), False),
    ],
)
async def test_a_refused_connection_is_known_by_its_class_not_its_name(raised, transient):
    def generate(request: ModelRequest) -> dict:
        raise raised

    with pytest.raises(ModelError) as failed:
        await InProcessTransport(generate).generate(ModelRequest(messages=[UserMessage(content="hi")]))
    assert isinstance(failed.value, TransientError) == transient


async def test_after_the_last_attempt_the_run_fails_with_the_last_error(api, session_id):
    model = api([500, 502, 200])
    result = await run(create_in_process_client(model.generate, model_retries=1, **FAST), session_id)
    assert result.status == "failed"
    assert result.error.startswith("model: generate raised HTTPStatusError: Server error '502 Bad Gateway'")
    assert model.requests == 2


@pytest.mark.parametrize(
    ("raised", "retried"),
    [(TransientError("model: overloaded"), True), (ModelError("model: refused"), False), (ValueError("x"), False)],
)
async def test_a_transient_error_of_your_own_is_retried_and_nothing_else(session_id, raised, retried):
    attempts: list[int] = []

    def generate(request: ModelRequest) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise raised
        return "done"

    result = await run(create_in_process_client(generate, model_retries=1, **FAST), session_id)
    assert result.status == ("completed" if retried else "failed"), result.error
    assert len(attempts) == (2 if retried else 1)


def rate_limited(fake, *replies: dict) -> None:
    limited = {"stderr": "Error: 429 rate limit exceeded, retry later\n", "exit": 1}
    fake.script(limited, limited, *replies)


def cli_client(fake, **options):
    return create_cli_client(style=CliStyles.OPENCODE, command=fake.command, transport=Transport.CLI, **options)


async def test_a_cli_rate_limit_is_retried_when_it_matches_retry_on(fake, session_id):
    rate_limited(fake, styled("opencode", envelope_answer("done")))
    client = cli_client(fake, retry_on=[r"rate limit|overloaded"], model_retries=2, **FAST)
    result = await run(client, session_id)
    assert result.status == "completed", result.error
    assert result.text == "done"
    assert len(fake.calls()) == 3
    assert result.metrics.launches == 3, "each failed launch is paid for"
    assert result.metrics.model_retries == 2


async def test_a_cli_rate_limit_is_final_without_retry_on(fake, session_id):
    rate_limited(fake, styled("opencode", envelope_answer("done")))
    result = await run(cli_client(fake, model_retries=2, **FAST), session_id)
    assert result.status == "failed"
    assert result.error == "cli: exit 1: Error: 429 rate limit exceeded, retry later"
    assert len(fake.calls()) == 1


async def test_a_failed_attempt_counts_its_repair_launches_too(fake, session_id):
    limited = {"stderr": "Overloaded\n", "exit": 1}
    fake.script(
        styled("opencode", '{"tool_calls": {"name": "x"}}'), limited, styled("opencode", envelope_answer("done"))
    )
    result = await run(cli_client(fake, retry_on="overloaded", model_retries=1, **FAST), session_id)
    assert result.status == "completed", result.error
    assert result.metrics.launches == 3 and result.metrics.model_retries == 1


async def test_a_run_whose_429s_outlast_its_retries_still_counts_every_attempt(api, session_id):
    model = api([429])
    result = await run(create_in_process_client(model.generate, model_retries=2, **FAST), session_id)
    assert result.status == "failed"
    assert result.error.startswith("model: generate raised HTTPStatusError: Client error '429 Too Many Requests'")
    assert model.requests == 3
    assert result.metrics.model_retries == 2 and result.metrics.launches == 0, "an in-process call launches nothing"


async def test_a_cli_rate_limit_that_outlasts_its_retries_still_counts_every_launch(fake, session_id):
    limited = {"stderr": "Error: 429 rate limit exceeded, retry later\n", "exit": 1}
    fake.script(limited, limited, limited, {"stdout": envelope_answer("never")})
    result = await run(cli_client(fake, retry_on=[r"rate limit"], model_retries=2, **FAST), session_id)
    assert result.status == "failed"
    assert result.error == "cli: exit 1: Error: 429 rate limit exceeded, retry later"
    assert len(fake.calls()) == 3
    assert result.metrics.launches == 3 and result.metrics.model_retries == 2


def test_a_retry_on_pattern_that_is_not_a_regular_expression_fails_at_once(fake):
    with pytest.raises(CliError, match=r"^cli: retry_on pattern 'rate \(limit' is not a regular expression: "):
        cli_client(fake, retry_on=["rate (limit"])


@pytest.mark.slow
async def test_an_acp_error_matching_retry_on_is_retried_with_the_same_prompt(agent, session_id):
    """The second exchange of a conversation opens a fresh session and sends it the whole
    transcript; the retry must send all of it again, not only what follows the last answer."""
    agent.script([[{"say": "noted"}], [{"error": "Rate limit reached for requests"}], [{"say": "you said hi"}]])
    client = create_cli_client(
        style=agent.style,
        command=agent.command,
        transport=Transport.ACP,
        env=agent.env,
        retry_on=[r"rate limit"],
        model_retries=1,
        **FAST,
    )
    assert (await client.ask("hi", Toolkit(), conversation_id=session_id)).text == "noted"
    result = await client.ask("what did I say?", Toolkit(), conversation_id=session_id)
    assert result.status == "completed", result.error
    assert result.text == "you said hi"
    _, refused, again = agent.received("session/prompt")
    expected = [{"type": "text", "text": "hi\n\n(your earlier answer) noted\n\nwhat did I say?"}]
    assert refused["params"]["prompt"] == again["params"]["prompt"] == expected
    assert result.metrics.model_retries == 1 and result.metrics.launches == 0


async def test_an_acp_error_is_final_without_retry_on(agent, session_id):
    agent.script([[{"error": "Rate limit reached for requests"}], [{"say": "done"}]])
    client = create_cli_client(
        style=agent.style, command=agent.command, transport=Transport.ACP, env=agent.env, model_retries=1, **FAST
    )
    result = await run(client, session_id)
    assert result.status == "failed"
    assert result.error == "acp: session/prompt failed: Rate limit reached for requests (-32603)"
    assert len(agent.received("session/prompt")) == 1


async def test_a_retried_turn_replays_on_resume_with_its_retry_count(api, session_id, storage):
    model = api([429, 200])
    client = create_in_process_client(model.generate, model_retries=1, **FAST)
    first = await run(client, session_id)
    assert first.status == "completed" and first.metrics.model_retries == 1
    again = await run(client, session_id)
    assert again.status == "completed" and again.text == "the answer"
    assert model.requests == 2, "the replayed turn calls no model"
    assert again.metrics.replayed_turns == 1
    assert again.metrics.model_retries == 0, "a replayed turn costs nothing this time"
    (record,) = storage.glob(f"nexusflow/sessions/{session_id}/steps/0/turn/*")
    stored = TurnRecord.model_validate(json.loads(json.loads(record.read_bytes())["result"])["data"])
    assert stored.reply.stats.model_retries == 1, "the record keeps what the turn cost"


@pytest.mark.slow
def test_the_readme_retries_snippet_runs(tmp_path):
    script = tmp_path / "retries.py"
    script.write_text(block("model-retries"))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=os.environ.copy(), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "completed 1 2"
