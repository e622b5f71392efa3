"""What the tests of the operator's view count as noise (tests/support/helpers/homes.py): an
error Prefect's server recovers from is left out only as far as it is known to recover, and a
failed assertion shows the noisy record whole, its exception included."""

from __future__ import annotations

from helpers.homes import loud, noise

LOCKED_VALIDATION = """\
16:18:49.053 | ERROR   | prefect.server - Encountered error during state validation
Traceback (most recent call last):
  File "prefect/server/orchestration/rules.py", line 274, in validate_proposed_state
sqlite3.OperationalError: database is locked

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked"""

OTHER_VALIDATION = """\
16:18:50.001 | ERROR   | prefect.server - Encountered error during state validation
Traceback (most recent call last):
sqlalchemy.exc.IntegrityError: (sqlite3.IntegrityError) UNIQUE constraint failed: task_run_state.id"""

AFTER = "16:18:51.000 | INFO    | Flow run 'happy-doberman' - Finished in state Completed()"


def test_a_state_validation_that_met_a_locked_sqlite_is_recovered_and_no_other():
    assert noise(f"{LOCKED_VALIDATION}\n{AFTER}") == []
    assert noise(f"{OTHER_VALIDATION}\n{AFTER}") == [
        "16:18:50.001 | ERROR   | prefect.server - Encountered error during state validation",
        "Traceback (most recent call last):",
    ]


def test_a_recovered_record_ends_at_the_next_record():
    warning = "16:18:52.000 | WARNING | nexusflow.server - something of ours"
    assert noise(f"{LOCKED_VALIDATION}\n{warning}") == [warning]


def test_loud_shows_each_noisy_record_with_its_exception():
    shown = loud(f"{AFTER}\n{LOCKED_VALIDATION}\n{OTHER_VALIDATION}\n{AFTER}")
    assert shown == OTHER_VALIDATION
