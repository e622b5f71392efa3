"""What a chat webhook would receive, for the alerts' tests: an HTTP receiver on 127.0.0.1
that keeps each POST's JSON body, and the normalising their assertions share. Imports
nothing from Prefect."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """What a chat webhook would receive: each POST's JSON body, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, str]] = []
        self.times: list[float] = []
        self.started = time.time()
        received, times = self.bodies, self.times

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                received.append(json.loads(self.rfile.read(length)))
                times.append(time.time())
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, done: Callable[[list[dict[str, str]]], bool], timeout: float = 60) -> list[dict[str, str]]:
        deadline = time.monotonic() + timeout
        while not done(self.bodies) and time.monotonic() < deadline:
            time.sleep(0.5)
        return list(self.bodies)


TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\+00:00")
"""A time as a notification's template prints it: normalised to ``<time>``."""
UI = re.compile(r"http://127\.0\.0\.1:\d+/runs/flow-run/")
"""The server's UI address: its port is the server's as it was started (the tier's server may
have been started again on another port by a test before this one)."""
FLOW_RUN = "<ui>/runs/flow-run/"


def normalised(body: str) -> str:
    """A notification's body with its times and its UI's port normalised."""
    return UI.sub(FLOW_RUN, TIME.sub("<time>", body))
