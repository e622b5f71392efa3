"""Where the time of a first ``nexusflow demo`` goes: the command against its yardsticks,
cold (a fresh PREFECT_HOME, Prefect's embedded server) and warm (a server already running).

    python benchmarks/cold_start.py [--rounds 3]

Each round runs, in turn: ``python -c pass`` (the interpreter), ``prefect version`` (importing
Prefect), ``nexusflow --help`` (the command without Prefect), ``nexusflow demo`` cold and
``nexusflow demo`` warm. Medians are printed with their ratio to ``python -c pass``, and the
cold demo is split by the timestamps Prefect logs: until the embedded server is starting
(imports), until the flow run begins (server start and database migrations), the rest (the
run and the server's stop).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from helpers.servers import free_port

BIN = Path(sys.executable).parent


def _environment(home: str, port: int) -> dict[str, str]:
    """A new user's environment: no Prefect setting but a home and a port of its own."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PREFECT_")}
    env.update({"PREFECT_HOME": home, "PREFECT_SERVER_API_PORT": str(port)})
    return env


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Seconds, the wall clock at the start, and what the command printed."""
    wall = time.time()
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, wall, done.stdout + done.stderr


def _logged(output: str, wall: float, text: str) -> float | None:
    """Seconds from the start to the first Prefect log line containing ``text``."""
    for line in output.splitlines():
        found = re.match(r"(\d\d):(\d\d):(\d\d\.\d+) \|", line)
        if found and text in line:
            start = datetime.datetime.fromtimestamp(wall)
            hours, minutes, seconds = int(found[1]), int(found[2]), float(found[3])
            at = start.replace(hour=hours, minute=minutes, second=0, microsecond=0).timestamp() + seconds
            return at - wall
    return None


def _start_server(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [str(BIN / "nexusflow"), "server"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=1):
                return server
        except OSError:
            time.sleep(0.5)
    os.killpg(server.pid, signal.SIGKILL)
    raise SystemExit("the benchmark's server did not start")


def main(rounds: int) -> None:
    names = ["python -c pass", "prefect version", "nexusflow --help", "nexusflow demo (cold)", "nexusflow demo (warm)"]
    times: dict[str, list[float]] = {name: [] for name in names}
    parts: dict[str, list[float]] = {"imports": [], "server start": [], "run and stop": []}
    with tempfile.TemporaryDirectory() as warm_home:
        warm_port = free_port()
        warm = _environment(warm_home, warm_port)
        server = _start_server(warm, warm_port)
        try:
            timed([str(BIN / "nexusflow"), "demo"], warm)  # the warm server's first run creates its blocks
            for _ in range(rounds):
                with tempfile.TemporaryDirectory() as cold_home:
                    cold = _environment(cold_home, free_port())
                    times["python -c pass"].append(timed([sys.executable, "-c", "pass"], cold)[0])
                    times["prefect version"].append(timed([str(BIN / "prefect"), "version"], cold)[0])
                    times["nexusflow --help"].append(timed([str(BIN / "nexusflow"), "--help"], cold)[0])
                    seconds, wall, output = timed([str(BIN / "nexusflow"), "demo"], cold)
                    times["nexusflow demo (cold)"].append(seconds)
                    starting = _logged(output, wall, "Starting temporary server")
                    beginning = _logged(output, wall, "Beginning flow run")
                    if starting is not None and beginning is not None:
                        parts["imports"].append(starting)
                        parts["server start"].append(beginning - starting)
                        parts["run and stop"].append(seconds - beginning)
                times["nexusflow demo (warm)"].append(timed([str(BIN / "nexusflow"), "demo"], warm)[0])
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
    base = statistics.median(times["python -c pass"])
    print(f"{rounds} rounds, interleaved, median seconds (ratio to python -c pass)")
    for name in names:
        median = statistics.median(times[name])
        print(f"{name:<24} {median:7.2f} s  ({median / base:6.1f}x)")
    cold, warm_median = (
        statistics.median(times["nexusflow demo (cold)"]),
        statistics.median(times["nexusflow demo (warm)"]),
    )
    print(f"cold / warm demo         {cold / warm_median:7.2f}x")
    if parts["imports"]:
        print("cold demo, by Prefect's log timestamps:")
        for name, values in parts.items():
            print(f"  {name:<22} {statistics.median(values):7.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    main(parser.parse_args().rounds)
