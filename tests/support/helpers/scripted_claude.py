#!/usr/bin/env python3
"""A stand-in for Claude Code's one-shot mode, enough for ``styles verify``'s recipe: it reads
the prompt on stdin, asks ``$ANTHROPIC_BASE_URL/v1/messages`` (the scripted model server)
with ``--model``, and prints claude's ``--output-format json`` result (with the server's
usage); an HTTP error is an ``is_error`` result and exit 1, as claude does.

``SCRIPTED_CLAUDE_VERSION`` is what ``--version`` says (default ``2.1.197 (Claude Code)``).
``SCRIPTED_CLAUDE_DRIFT=1`` drifts as a future release might: an HTTP error is answered with
claude's own words, ``[claude-code:unrecognized_model]``, not the server's. (Claude Code 2.1.332
keeps the server's words in its JSON ``result`` and writes that diagnostic to stderr; issue 42.)"""

import json
import os
import sys
import urllib.error
import urllib.request

argv = sys.argv[1:]
if argv == ["--version"]:
    print(os.environ.get("SCRIPTED_CLAUDE_VERSION", "2.1.197 (Claude Code)"))
    sys.exit(0)
model = argv[argv.index("--model") + 1] if "--model" in argv else "claude-sonnet"
prompt = sys.stdin.read()
body = {"model": model, "max_tokens": 1024, "messages": [{"role": "user", "content": prompt}]}
request = urllib.request.Request(
    f"{os.environ['ANTHROPIC_BASE_URL'].rstrip('/')}/v1/messages",
    data=json.dumps(body).encode(),
    headers={
        "content-type": "application/json",
        "x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""),
        "anthropic-version": "2023-06-01",
    },
)
try:
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
except urllib.error.HTTPError as exc:
    said = exc.read().decode(errors="replace")
    words = "[claude-code:unrecognized_model]" if os.environ.get("SCRIPTED_CLAUDE_DRIFT") else said
    print(json.dumps({"type": "result", "is_error": True, "result": f"API Error: {exc.code} {words}"}))
    sys.exit(1)
text = "".join(block.get("text", "") for block in answer.get("content", []) if block.get("type") == "text")
usage = answer.get("usage", {})
print(
    json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": text,
            "usage": usage,
            "total_cost_usd": 0.0,
            "modelUsage": {model: {"inputTokens": usage.get("input_tokens", 0)}},
        }
    )
)
