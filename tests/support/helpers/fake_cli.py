#!/usr/bin/env python3
"""A fake agent CLI for hermetic tests of the one-shot transport.

Each launch appends one JSON line to $FAKE_CLI_DIR/calls.jsonl (argv, how stdin was
connected and what came on it, the contents of argv elements that name files, selected
environment, pid and process group, the epoch time of the launch), then plays the next reply of
$FAKE_CLI_DIR/script.json:

    {"stdout": str, "stdout_hex": str, "stderr": str, "exit": int, "out": str,
     "sleep": float, "child": true}

"out" is written to the path after "-o"; "child" starts a grandchild that sleeps (its pid
is recorded in $FAKE_CLI_DIR/children); "litter" leaves a file of that name in its temporary
folder, as gemini leaves a report of each model error.
"""

import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

root = Path(os.environ["FAKE_CLI_DIR"])
argv = sys.argv[1:]
mode = os.fstat(0).st_mode
stdin_kind = "pipe" if stat.S_ISFIFO(mode) else ("devnull" if stat.S_ISCHR(mode) else "other")
stdin = sys.stdin.buffer.read().decode("utf-8") if stdin_kind == "pipe" else ""
files = {arg: Path(arg).read_text(encoding="utf-8") for arg in argv if os.path.isfile(arg)}
keys = [
    key for key in os.environ if key.startswith("FAKE_") or key in os.environ.get("FAKE_CLI_ENV_KEYS", "").split(",")
]

with open(root / "calls.jsonl", "a", encoding="utf-8") as log:
    record = {
        "argv": argv,
        "stdin_kind": stdin_kind,
        "stdin": stdin,
        "files": files,
        "env": {key: os.environ[key] for key in keys},
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "cwd": os.getcwd(),
        "time": time.time(),
    }
    log.write(json.dumps(record, ensure_ascii=False) + "\n")

calls = sum(1 for _ in open(root / "calls.jsonl", encoding="utf-8"))
script = json.loads((root / "script.json").read_text(encoding="utf-8"))
if calls > len(script):
    sys.stderr.write("fake cli: script exhausted\n")
    sys.exit(99)
reply = script[calls - 1]

if reply.get("child"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(root / "children", "a") as handle:
        handle.write(f"{child.pid}\n")
if "litter" in reply:
    Path(tempfile.gettempdir(), reply["litter"]).write_text("left behind", encoding="utf-8")
time.sleep(reply.get("sleep", 0))
if "out" in reply and "-o" in argv:
    Path(argv[argv.index("-o") + 1]).write_text(reply["out"], encoding="utf-8")
if "stderr" in reply:
    sys.stderr.buffer.write(reply["stderr"].encode("utf-8"))
    sys.stderr.flush()
if "stdout_hex" in reply:
    sys.stdout.buffer.write(bytes.fromhex(reply["stdout_hex"]))
if "stdout" in reply:
    sys.stdout.buffer.write(reply["stdout"].encode("utf-8"))
sys.stdout.flush()
sys.exit(reply.get("exit", 0))
