"""The scripted model server, over real HTTP on 127.0.0.1, in each provider's own shapes."""

import json
import time
import tomllib

import httpx
import pytest

from nexusflow.testing import ScriptedModelServer, ScriptedReply
from nexusflow.transports.oneshot.style import CliStyles

TOOL = "mcp__nexusflow__add"
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
APIS = ["anthropic", "chat", "responses", "gemini"]


def request(api: str, model: str, *, stream: bool = False) -> tuple[str, dict]:
    """A model turn in ``api``'s shape that offers the ``TOOL``: (path, body)."""
    if api == "gemini":
        path = f"/v1beta/models/{model}:" + ("streamGenerateContent?alt=sse" if stream else "generateContent")
        body = {
            "contents": [{"role": "user", "parts": [{"text": "add 2 and 3"}]}],
            "tools": [{"functionDeclarations": [{"name": TOOL, "parameters": SCHEMA}]}],
        }
        return path, body
    user = [{"role": "user", "content": "add 2 and 3"}]
    if api == "anthropic":
        body = {"messages": user, "max_tokens": 64, "tools": [{"name": TOOL, "input_schema": SCHEMA}]}
        return "/v1/messages", body | {"model": model, "stream": stream}
    if api == "chat":
        body = {"messages": user, "tools": [{"type": "function", "function": {"name": TOOL, "parameters": SCHEMA}}]}
        return "/v1/chat/completions", body | {"model": model, "stream": stream}
    body = {"input": user, "tools": [{"type": "function", "name": TOOL, "parameters": SCHEMA}]}
    return "/v1/responses", body | {"model": model, "stream": stream}


def sse(text: str) -> list[dict]:
    """The JSON payloads of an SSE body's ``data:`` lines."""
    datas = [line[len("data:") :].strip() for line in text.splitlines() if line.startswith("data:")]
    return [json.loads(data) for data in datas if data != "[DONE]"]


def whole_text(api: str, r: dict) -> str:
    if api == "anthropic":
        return r["content"][0]["text"]
    if api == "chat":
        return r["choices"][0]["message"]["content"]
    if api == "responses":
        return "".join(c["text"] for item in r["output"] if item["type"] == "message" for c in item["content"])
    return r["candidates"][0]["content"]["parts"][0]["text"]


def whole_call(api: str, r: dict) -> tuple[str, dict]:
    if api == "anthropic":
        block = next(b for b in r["content"] if b["type"] == "tool_use")
        return block["name"], block["input"]
    if api == "chat":
        function = r["choices"][0]["message"]["tool_calls"][0]["function"]
        return function["name"], json.loads(function["arguments"])
    if api == "responses":
        item = next(i for i in r["output"] if i["type"] == "function_call")
        return item["name"], json.loads(item["arguments"])
    call = r["candidates"][0]["content"]["parts"][0]["functionCall"]
    return call["name"], call["args"]


def streamed_text(api: str, events: list[dict]) -> str:
    if api == "anthropic":
        return "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    if api == "chat":
        return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    if api == "responses":
        return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    return "".join(p.get("text", "") for e in events for p in e["candidates"][0]["content"]["parts"])


def test_plain_replies_come_back_in_each_providers_shape():
    replies = [
        r for _ in APIS for r in (ScriptedReply.say("Hello there."), ScriptedReply.call("add", {"a": 2, "b": 3}))
    ]
    with ScriptedModelServer(replies) as server, httpx.Client(base_url=server.url) as client:
        assert server.url.startswith("http://127.0.0.1:") and server.port > 0
        for api in APIS:
            path, body = request(api, f"{api}-model-7")
            said = client.post(path, json=body).raise_for_status().json()
            assert whole_text(api, said) == "Hello there.", api
            assert said.get("model", said.get("modelVersion")) == f"{api}-model-7"
            called = client.post(path, json=body).raise_for_status().json()
            assert whole_call(api, called) == (TOOL, {"a": 2, "b": 3}), api
        assert server.remaining == 0
        assert [t.api for t in server.turns()] == [api for api in APIS for _ in range(2)]


@pytest.mark.anyio
@pytest.mark.parametrize("api", APIS)
async def test_streamed_replies_reassemble_to_the_scripted_text(api):
    text = 'Streamed, in one piece: ünïcode and "quotes".\nSecond line.'
    async with ScriptedModelServer([text]) as server, httpx.AsyncClient(base_url=server.url) as client:
        path, body = request(api, "stream-model", stream=True)
        response = (await client.post(path, json=body)).raise_for_status()
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse(response.text)
        assert streamed_text(api, events) == text
        assert "stream-model" in response.text
        if api == "chat":
            assert response.text.rstrip().endswith("data: [DONE]")
    assert server.remaining == 0 and len(server.turns()) == 1


def test_side_requests_do_not_consume_the_queue():
    with (
        ScriptedModelServer(["the real answer"], model="house-model") as server,
        httpx.Client(base_url=server.url) as client,
    ):
        title = {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "Generate a title: hello"}]}
        assert client.post("/v1/messages", json=title).json()["content"][0]["text"] == "Scripted"
        summary = {"model": "m", "messages": [{"role": "system", "content": "Summarize the chat"}]}
        summary["messages"].append({"role": "user", "content": "hello"})
        assert (
            client.post("/v1/chat/completions", json=summary).json()["choices"][0]["message"]["content"] == "Scripted"
        )
        assert client.post("/v1/messages/count_tokens", json=title).json()["input_tokens"] == 1
        assert client.get("/v1/models").json()["data"][0]["id"] == "house-model"
        assert server.remaining == 1
        assert len(server.requests) == 4 and all(r.side for r in server.requests)
        assert server.turns() == []
        path, body = request("anthropic", "m")
        assert whole_text("anthropic", client.post(path, json=body).json()) == "the real answer"
        assert server.remaining == 0
        assert [(t.path, t.side) for t in server.turns()] == [("/v1/messages", False)]


@pytest.mark.parametrize("api", APIS)
def test_scripted_failure_and_an_empty_queue_answer_with_provider_errors(api):
    with (
        ScriptedModelServer([ScriptedReply.fail(429, "slow down")]) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        path, body = request(api, "m")
        failed = client.post(path, json=body)
        assert failed.status_code == 429 and failed.json()["error"]["message"] == "slow down"
        error = failed.json()["error"]
        assert error.get("status", error.get("type")) in ("rate_limit_error", "RESOURCE_EXHAUSTED")
        if api == "anthropic":
            assert failed.json()["type"] == "error"
        empty = client.post(path, json=body)
        assert empty.status_code == 500
        assert empty.json()["error"]["message"] == "scripted model server: no scripted reply left"
        assert len(server.turns()) == 2


def test_api_keys_are_redacted_in_the_record_but_the_body_is_kept():
    secrets = {"x-api-key": "sk-ant-secret1", "authorization": "Bearer sk-secret2", "x-goog-api-key": "AIza-secret3"}
    with ScriptedModelServer(["a", "b", "c"]) as server, httpx.Client(base_url=server.url) as client:
        sent = []
        for api, (header, value) in zip(["anthropic", "chat", "gemini"], secrets.items(), strict=True):
            path, body = request(api, "m", stream=api == "gemini")
            if api == "gemini":
                path += "&key=AIza-secret4"
            client.post(path, json=body, headers={header: value, "anthropic-version": "2023-06-01"}).raise_for_status()
            sent.append(body)
    recorded = server.requests
    assert [r.body for r in recorded] == sent
    for r, header in zip(recorded, secrets, strict=True):
        assert r.headers[header] == "<redacted>" and r.headers["anthropic-version"] == "2023-06-01"
    assert recorded[2].path == "/v1beta/models/m:streamGenerateContent?alt=sse&key=<redacted>"
    assert "secret" not in repr(recorded)


def test_sync_context_manager_closes_the_port_on_exit():
    with ScriptedModelServer() as server:
        url = server.url
        assert httpx.get(f"{url}/v1/models").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/v1/models", timeout=2)


def test_push_appends_and_environment_points_codex_at_the_server(tmp_path):
    with ScriptedModelServer(["first"]) as server, httpx.Client(base_url=server.url) as client:
        server.push("second", ScriptedReply.slow(0.3, "third"))
        assert server.remaining == 3
        env = server.environment(CliStyles.CODEX, tmp_path)
        config = tomllib.loads((tmp_path / ".codex" / "config.toml").read_text())
        assert env["CODEX_HOME"] == str(tmp_path / ".codex") and env["HOME"] == str(tmp_path)
        provider = config["model_providers"][config["model_provider"]]
        assert provider["base_url"] == f"{server.url}/v1" and provider["wire_api"] == "responses"
        body = {"model": config["model"], "input": "hi there, friend"}
        texts = [whole_text("responses", client.post(f"{provider['base_url']}/responses", json=body).json())]
        texts.append(whole_text("responses", client.post(f"{provider['base_url']}/responses", json=body).json()))
        started = time.monotonic()
        texts.append(whole_text("responses", client.post(f"{provider['base_url']}/responses", json=body).json()))
        assert time.monotonic() - started >= 0.3
        assert texts == ["first", "second", "third"] and server.remaining == 0


@pytest.mark.parametrize("api", APIS)
def test_a_body_that_is_not_a_json_object_gets_a_400_and_the_connection_survives(api):
    with ScriptedModelServer(["kept"]) as server, httpx.Client(base_url=server.url) as client:
        path, body = request(api, "m")
        bad = client.post(path, content=b"[1, 2]", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and "not a JSON object" in bad.json()["error"]["message"]
        assert whole_text(api, client.post(path, json=body).json()) == "kept"
        assert server.remaining == 0


def test_gemini_snake_case_tools_are_offered_tools():
    with (
        ScriptedModelServer([ScriptedReply.call("add", {"a": 1, "b": 2})]) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        body = {
            "contents": [{"role": "user", "parts": [{"text": "add"}]}],
            "tools": [{"function_declarations": [{"name": TOOL, "parameters": SCHEMA}]}],
        }
        reply = client.post("/v1beta/models/m:generateContent", json=body).json()
    call = reply["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert call == {"name": TOOL, "args": {"a": 1, "b": 2}}


def test_only_key_parameters_are_redacted_in_a_query():
    with ScriptedModelServer() as server, httpx.Client(base_url=server.url) as client:
        client.get("/v1/models?monkey=banana&Key=s1&api_key=s2&page=2")
    assert server.requests[0].path == "/v1/models?monkey=banana&Key=<redacted>&api_key=<redacted>&page=2"


def test_a_request_is_recorded_when_it_arrives_not_when_it_is_answered():
    """A test's deadline reasons on ``at``: a slow reply must not move it."""
    with ScriptedModelServer([ScriptedReply.slow(1.0)]) as server, httpx.Client(base_url=server.url) as client:
        path, body = request("chat", "m")
        sent = time.time()
        client.post(path, json=body)
        answered = time.time()
    (turn,) = server.turns()
    assert sent <= turn.at < sent + 0.9 and answered >= turn.at + 1.0
