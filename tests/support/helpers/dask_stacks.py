"""Preloaded into each Dask worker of tests/topology/test_fanout_dask.py (by path: the workers cannot
import tests/): on ``SIGUSR1`` the stacks of all of the worker's threads go to a file of its own
in ``$NEXUSFLOW_TEST_DASK_STACKS``, written by faulthandler from the signal handler, which needs
neither the GIL nor the worker's event loop. A test whose batch lost a member asks for them
(``worker_stacks``) and its message says where each worker stood.

Never on a timer: faulthandler walks the threads' states without the interpreter's lock, and a
walk that met a thread as it exited crashed its worker (a ``SIGSEGV`` in a member's run, seen
with a dump every 5 s, the member ``KilledWorker``), or left it hung (every 45 s in CI: a
member that "stopped beating" on a live worker, which the scheduler restarted minutes later)."""

from __future__ import annotations

import faulthandler
import os
import signal
from pathlib import Path
from typing import Any

ASK = signal.SIGUSR1


def dask_setup(worker: Any) -> None:
    folder = os.environ.get("NEXUSFLOW_TEST_DASK_STACKS")
    if not folder:
        return
    handle = open(Path(folder) / f"worker-{os.getpid()}.txt", "w")  # open for the process's life
    faulthandler.register(ASK, file=handle, all_threads=True)
