"""What the one-shot CLI transport adds to a launch: a turn through ``CliTransport`` against
a bare ``subprocess.run`` of the same fake CLI with the same prompt, in one process.

    python benchmarks/cli_overhead.py [--launches 30]

The fake CLI is a Python one-file script that reads stdin and prints a final-answer
envelope, so both sides pay the same interpreter start-up; the difference is the
transport: temp directory, process group, pipe draining, group kill, envelope render and
parse.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from nexusflow import CliStyle, ModelRequest
from nexusflow.transports.oneshot import CliConfig, CliTransport, render

FAKE = """\
import sys
sys.stdin.read()
sys.stdout.write('{"content": "ok"}\\n')
"""


def bare(command: list[str], prompt: bytes) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, input=prompt, capture_output=True, check=True)
    assert b'"ok"' in done.stdout
    return time.perf_counter() - started


async def transported(cli: CliTransport, request: ModelRequest) -> float:
    started = time.perf_counter()
    reply = await cli.generate(request)
    assert reply.content == "ok"
    return time.perf_counter() - started


async def main(launches: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch, "fake_cli.py")
        script.write_text(FAKE)
        request = ModelRequest.model_validate(
            {"messages": [{"role": "user", "content": "benchmark " * 200}], "tools": []}
        )
        style = CliStyle(name="bench", args=[str(script)], prompt_mode="stdin", verified="bench")
        cli = CliTransport(CliConfig(style=style, command=sys.executable))
        prompt = render(request).encode()
        command = [sys.executable, str(script)]
        bare(command, prompt)
        await transported(cli, request)
        bare_runs, cli_runs = [], []
        for _ in range(launches):
            bare_runs.append(bare(command, prompt))
            cli_runs.append(await transported(cli, request))
    bare_ms = statistics.median(bare_runs) * 1000
    cli_ms = statistics.median(cli_runs) * 1000
    print(f"{launches} launches each, interleaved, median; prompt {len(prompt)} bytes on stdin")
    print(f"bare subprocess.run   : {bare_ms:8.2f} ms/launch")
    print(f"CliTransport.generate : {cli_ms:8.2f} ms/launch")
    print(f"difference            : {cli_ms - bare_ms:8.2f} ms/launch")
    print(f"ratio                 : {cli_ms / bare_ms:8.3f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=30)
    anyio.run(main, parser.parse_args().launches)
