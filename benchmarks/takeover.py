"""How long a crashed run's session takes to resume, wherever the server lives.

In each place (a long-lived ``prefect server``, the embedded default with no
``PREFECT_API_URL``, a server restarted between the crash and the resume, and ``elsewhere``:
a long-lived server with the crashed run in a PID namespace of its own, so that its process
cannot be looked up, as on another machine), a three-turn run
(``tests/support/helpers/durable_run.py``) is SIGKILLed with its process group right after its first
stored step, and the same session is started again in a new process. Baseline, in the same
place and run: the same session started once more after it completed (every step replays,
nothing is taken over). A holder whose process is gone on this machine is taken over at
once; one elsewhere once its lock is stale (8 s without a beat): the resume's extra time over
the baseline is the take-over.

    .venv/bin/python benchmarks/takeover.py --repeats 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from _servers import base_env, prefect_server, stop

HELPER = Path(__file__).resolve().parent.parent / "tests" / "support" / "helpers" / "durable_run.py"
PLACES = ("long-lived", "embedded", "restarted", "elsewhere")
ELSEWHERE = ("unshare", "--pid", "--fork", "sh", "-c", '"$0" "$@"; exit $?')
"""The run in a PID namespace of its own, under a shell: the namespace's first process ignores
the SIGKILL a run sends itself (``--kill-after``), so the run is not that process."""


def timed(
    env: dict[str, str], root: Path, session: str, logs: Path, *more: str, prefix: tuple[str, ...] = ()
) -> tuple[float, int, str]:
    """Seconds, exit status and stderr of one ``durable_run.py`` process."""
    started = time.monotonic()
    done = subprocess.run(
        [*prefix, sys.executable, str(HELPER), session, str(logs), *more],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,  # its group: the kill takes its embedded server too
    )
    return time.monotonic() - started, done.returncode, done.stderr


def one_place(place: str, root: Path, stack: ExitStack) -> tuple[float, float]:
    """(resume after a crash, rerun after completion), in seconds."""
    env = {**base_env(), "HOME": str(root), "PREFECT_HOME": str(root / "home")}
    server = None
    if place != "embedded":
        server = prefect_server("sqlite", root / "server", stack)
        env["PREFECT_API_URL"] = server.api_url
    crashed, finished = root / "crashed", root / "finished"
    crashed.mkdir()
    finished.mkdir()
    prefix = ELSEWHERE if place == "elsewhere" else ()
    _, code, err = timed(env, root, "crashed", crashed, "--kill-after", "1", prefix=prefix)
    assert code in (-signal.SIGKILL, 128 + signal.SIGKILL), err[-2000:]
    _, code, err = timed(env, root, "finished", finished)
    assert code == 0, err[-2000:]
    if place == "restarted" and server is not None:
        stop(server.process)
        restarted = prefect_server("sqlite", root / "server", stack)
        env["PREFECT_API_URL"] = restarted.api_url
    resumed, code, err = timed(env, root, "crashed", crashed)
    assert code == 0 and "taking the session over" in err, err[-2000:]
    rerun, code, err = timed(env, root, "finished", finished)
    assert code == 0, err[-2000:]
    return resumed, rerun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--places", default=",".join(PLACES))
    args = parser.parse_args()
    header = f"{'place':<12} {'resume (s)':>11} {'rerun (s)':>10} {'take-over (s)':>14} {'ratio':>6}"
    print(f"{header}  load {os.getloadavg()[0]:.2f}")
    for place in args.places.split(","):
        resumes, reruns = [], []
        for _ in range(args.repeats):
            root = Path(tempfile.mkdtemp(prefix=f"takeover-{place}-"))
            with ExitStack() as stack:
                stack.callback(shutil.rmtree, root, True)
                resumed, rerun = one_place(place, root, stack)
            resumes.append(resumed)
            reruns.append(rerun)
        resume, rerun = statistics.median(resumes), statistics.median(reruns)
        print(f"{place:<12} {resume:>11.1f} {rerun:>10.1f} {resume - rerun:>14.1f} {resume / rerun:>5.2f}x")


if __name__ == "__main__":
    main()
