"""A step whose result could not be stored must fail the run: Prefect logs a failed commit
and carries on, and the run would report success while its resume repeats the step."""

from __future__ import annotations

from prefect.transactions import Transaction

from .._prefect.errors import storage_step_failed
from .._prefect.storage import storage_failure
from .errors import storage_step_rolled_back

_rolled_back: set[str] = set()


def note_unstored(transaction: Transaction) -> None:
    """Prefect rolls a step's transaction back when its record cannot be committed."""
    if transaction.key:
        _rolled_back.add(transaction.key)


def forget(key: str) -> None:
    """Called before a step runs, so an earlier failed attempt of the same key is not read
    as this one's."""
    _rolled_back.discard(key)
    storage_failure(key)


def check_stored(name: str, key: str, replayed: bool) -> None:
    """Raise ``StorageError`` if the step that just finished left no record."""
    why = storage_failure(key)
    rolled_back = key in _rolled_back
    _rolled_back.discard(key)
    if replayed or (why is None and not rolled_back):
        return
    if why:
        raise storage_step_failed(name, key, why)
    raise storage_step_rolled_back(name, key)
