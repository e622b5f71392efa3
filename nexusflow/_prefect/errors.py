"""The words of Prefect's edge: a record that could not be stored or read, a storage it
cannot list, the state messages of a run nexusflow (not Prefect's engine) found crashed, and a
fan-out's member that never started.
``storage_step_failed`` is shared with ``nexusflow.tasks.errors``, a floor above."""

from __future__ import annotations

from ..errors import MapMemberLost, StorageError


def storage_cannot_list(kind: str) -> StorageError:
    return StorageError(
        f"storage: nexusflow cannot list or delete records in a {kind} (it knows the local file system and S3 buckets)"
    )


def storage_step_failed(step: str, key: str, why: str) -> StorageError:
    return StorageError(f"storage: the result of {step} could not be stored under {key}: {why}")


def storage_step_unsynced(step: str, key: str, exc: BaseException | None) -> StorageError:
    """``exc``: what the record's sync raised; None when it was cancelled."""
    why = f"{type(exc).__name__}: {exc}" if exc is not None else "its sync was cancelled"
    return storage_step_failed(step, key, why)


def storage_write_failed(key: str, exc: BaseException) -> StorageError:
    return StorageError(f"storage: could not write {key}: {type(exc).__name__}: {exc}")


def storage_read_failed(key: str, exc: BaseException) -> StorageError:
    return StorageError(f"storage: could not read {key}: {type(exc).__name__}: {exc}")


def storage_record_unreadable(key: str, exc: BaseException) -> StorageError:
    return StorageError(f"storage: the record {key} is unreadable: {exc}")


# Honest states (issue 42): the messages a run's Prefect state carries when nexusflow, not
# Prefect's engine, ends it.
def crashed_process_died(session_id: str, pid: int, found_by: str) -> str:
    return f'nexusflow: session "{session_id}": its process {pid} on this machine died; found by {found_by}'


def crashed_not_beating(session_id: str, seconds: float, found_by: str) -> str:
    return f'nexusflow: session "{session_id}": its run has not beaten for {seconds:.0f}s; found by {found_by}'


def map_member_never_started(session_id: str, seconds: float) -> MapMemberLost:
    return MapMemberLost(
        session_id,
        seconds,
        f"has not started {seconds:.0f}s after it was sent to its task runner, while nothing else in its batch"
        " moved: the process it was sent to is frozen or gone (a Dask worker stopped, or a cluster with no"
        " worker left)",
    )
