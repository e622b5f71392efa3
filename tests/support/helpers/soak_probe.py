"""The leak probe of ``tests/server/operator/test_soak_samples.py``, in a process of its own:
a sample, one taken after a burst of AnyIO worker threads (idle by then), and one taken with
one more of each thing the soak counts. Prints the three samples as JSON lines."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from soak import MIB, _process_tree, sample


async def main(tmp_path: Path) -> None:
    from prefect.blocks.system import Secret
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.variables import Variable

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    skip = set(_process_tree().get(os.getpid(), []))
    before = await sample(tmp, skip)
    async with anyio.create_task_group() as group:
        for _ in range(6):
            group.start_soon(anyio.to_thread.run_sync, time.sleep, 0.2)
    pooled = await sample(tmp, skip)
    # Pages of its own: a bytearray may reuse memory the process freed earlier and still holds
    # (RSS moved 60 KB for 5 MiB in a long-lived xdist worker).
    buffer = mmap.mmap(-1, 5 * MIB)
    buffer.write(os.urandom(5 * MIB))
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tmp / "left.txt").write_text("x")
    async with get_client() as client:
        limit = await client.create_global_concurrency_limit(
            GlobalConcurrencyLimitCreate(name="nexusflow-soak-probe", limit=1)
        )
        block = await Secret(value="x").asave("soak-probe", overwrite=True)
        await Variable.aset("soak_probe", 1, overwrite=True)
        try:
            with open(tmp_path / "open.txt", "w"):
                after = await sample(tmp, skip)
        finally:
            buffer.close()
            release.set()
            thread.join()
            child.kill()
            child.wait()
            await client.delete_global_concurrency_limit_by_name("nexusflow-soak-probe")
            await client.delete_block_document(block)
            await Variable.aunset("soak_probe")
    assert limit
    for values in (before, pooled, after):
        print(json.dumps(values))


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]))
