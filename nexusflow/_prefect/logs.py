"""Prefect's run loggers and the wording of their lines that nexusflow's filters key on.

Three filters outside this wing change how Prefect's engines tell a run's end: an expected
failure is one line (``flows/quiet.py``), a run that ends waiting is no error
(``config/waits.py``), an interrupted run is no crash (``flows/interrupt.py``). Each keys on
a logger's name or a line's first words, which are Prefect's and not an API: they are named
here once, as measured on 3.9.1, and each has its test in README.md's ledger."""

from __future__ import annotations

import logging

FLOW_RUNS = "prefect.flow_runs"
"""The flow engine's logger for a run (each record names its ``flow_run_id``)."""
TASK_RUNS = "prefect.task_runs"
"""The task engine's logger for a run (each record names its ``task_run_id``)."""
FINISHED = "Finished in state "
"""How both engines' closing line of a run begins."""
CRASH_DETECTED = "Crash detected!"
"""How the engines' line for a run that a cancellation (or any ``BaseException``) went through begins."""


def add_filter(filter: logging.Filter, *names: str) -> None:
    """Put ``filter`` on each named logger; adding it twice is a no-op."""
    for name in names:
        logging.getLogger(name).addFilter(filter)
