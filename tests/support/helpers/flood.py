"""Another local process holding idle TCP connections to a port, as issue 41's attacker did.

    python flood.py PORT COUNT HOLD

Raises its own open-file limit to the hard limit, opens up to COUNT connections to
127.0.0.1:PORT (fewer if that limit is lower) and never sends a byte on them; prints
``holding <opened> <failed> <seconds>`` once done and keeps them until its stdin closes or
HOLD seconds pass. Each connect has a timeout and the whole flood a deadline, so it always
stops by itself.
"""

from __future__ import annotations

import resource
import select
import socket
import sys
import time

RESERVED = 8
"""Descriptors left for the interpreter itself."""


def main(port: int, count: int, hold: float) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    wanted = min(count, hard - RESERVED) if hard != resource.RLIM_INFINITY else count
    started = time.monotonic()
    deadline = started + 120
    held: list[socket.socket] = []
    failed = 0
    while len(held) < wanted and failed < 1000 and time.monotonic() < deadline:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(5)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            sock.close()
            failed += 1
            continue
        held.append(sock)
    print(f"holding {len(held)} {failed} {time.monotonic() - started:.2f}", flush=True)
    select.select([sys.stdin], [], [], hold)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
