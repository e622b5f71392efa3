"""The ``nexusflow`` command's expected failures, one after another in this process:
``python failing_commands.py CASES`` (a JSON file: a list of ``[name, environment, argv]``)
runs the console script's ``main`` on each argv with the environment added, between two
marker lines on stderr (``=== NAME`` and ``=== NAME exit CODE``), so one Python and Prefect
start-up serves every case. Imported by nothing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from nexusflow.command import main

for name, environment, argv in json.loads(Path(sys.argv[1]).read_text()):
    os.environ.update(environment)
    print(f"=== {name}", file=sys.stderr, flush=True)
    code = main(argv)
    sys.stdout.flush()
    print(f"=== {name} exit {code}", file=sys.stderr, flush=True)
