"""The child side of ``crash_at_every_step``: a user's script run with its step records and
tool calls logged, and its process group SIGKILLed once a chosen record is stored.

    python -m nexusflow.testing._crash_hook LOG KILL_AFTER SCRIPT [ARG ...]

``LOG`` gets a line per step record stored (``stored <session> <step> <kind> <call>``) and
per tool call started (``tool <session> <step> <call> <name>``). ``KILL_AFTER`` is how many
step records are stored when the group dies: 0 once the run's first record (its inputs) is
stored, before any step; -1 never. The kill happens in here, not in the parent, because only
the writer knows the moment a record is stored: a kill from outside would race it.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import nexusflow._prefect.storage as storage
from nexusflow.config.policies import NO_POLICY, ToolPolicy
from nexusflow.messages import ToolResult
from nexusflow.state._position import CallPosition
from nexusflow.toolkit.core import Toolkit


class Hook:
    """Counts the step records this process stores (parallel calls store from worker threads,
    hence the lock: two records stored at once must not both miss the k-th)."""

    def __init__(self, log: Path, kill_after: int) -> None:
        self.log = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.kill_after = kill_after
        self.stored = 0
        self.counting = threading.Lock()

    def say(self, *fields: object) -> None:
        """One line in one write: whole even when the process dies right after."""
        os.write(self.log, (" ".join(str(field) for field in fields) + "\n").encode())

    def after_write(self, path: Path) -> None:
        parts = path.parts
        if len(parts) >= 7 and parts[-7:-5] == (storage.ROOT, "sessions") and parts[-4] == "steps":
            with self.counting:  # .../nexusflow/sessions/<session>/steps/<step>/<kind>/<call>-<digest>
                self.stored += 1
                self.say("stored", parts[-5], parts[-3], parts[-2], parts[-1].split("-", 1)[0])
                if self.stored == self.kill_after:
                    os.killpg(0, signal.SIGKILL)
        elif self.kill_after == 0 and len(parts) >= 4 and parts[-4:-2] == (storage.ROOT, "sessions"):
            os.killpg(0, signal.SIGKILL)

    def install(self) -> None:
        write, put, sync = storage.write_atomically, storage._put_in_place, storage.sync_step_record
        call, say = Toolkit.call, self.say

        def write_then_count(path: Path, content: bytes) -> None:
            write(path, content)
            self.after_write(path)

        def place_then_count(path: Path, content: bytes, in_place: Any) -> None:
            """A step record is stored once it is in place, before its run hears so: a SIGKILL
            keeps what the kernel holds (the sync after is for a power failure, which no kill
            is). Counted at its sync, the kill fell wherever the run had got to meanwhile (a
            model turn does not wait for the tool record's sync), not between two steps."""
            handle = put(path, content, sync=False)
            self.after_write(path)
            in_place()
            sync(handle, path)

        async def logged_call(
            self: Toolkit,  # the name Toolkit.call gives it
            name: str,
            arguments: str | dict[str, Any],
            policy: ToolPolicy = NO_POLICY,
            position: CallPosition | None = None,
        ) -> ToolResult:
            where = (position.session_id, position.step, position.index) if position else ("-", "-", "-")
            say("tool", *where, name)
            return await call(self, name, arguments, policy, position)

        storage.write_atomically = write_then_count
        storage._write_step_record_then_sync = place_then_count
        Toolkit.call = logged_call  # type: ignore[method-assign]


def main() -> None:
    log, kill_after, script, *args = sys.argv[1:]
    Hook(Path(log), int(kill_after)).install()
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).resolve().parent)  # as `python SCRIPT` would have it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
