"""An HTTP proxy on 127.0.0.1 that forwards nothing and records what it was asked: give an
agent CLI its address in the proxy variables (loopback exempt), and every connection it
tries beyond this machine shows here, without strace or a network namespace."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

LOOPBACK = "127.0.0.1,localhost,::1"


@contextmanager
def proxy_recorder() -> Iterator[tuple[dict[str, str], list[str]]]:
    """The environment naming the proxy, and the request lines it receives (``CONNECT
    github.com:443 HTTP/1.1``); each connection is closed unanswered."""
    asked: list[str] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(2)
                try:
                    asked.append(connection.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace"))
                except OSError:
                    asked.append("<a connection that sent nothing>")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    names = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
    env = {name: url for name in names} | {name.lower(): url for name in names}
    env |= {"NO_PROXY": LOOPBACK, "no_proxy": LOOPBACK}
    try:
        yield env, asked
    finally:
        stop.set()
        thread.join()
        listener.close()
