"""Which failures are the Prefect API's passing trouble (a 503 from a busy SQLite server,
a locked database, a dropped connection), and the backoff a run is retried with."""

from __future__ import annotations

import httpx
from prefect.exceptions import PrefectHTTPStatusError
from tenacity import retry_if_exception, stop_after_attempt, wait_exponential_jitter

from .._support.retrying import Retrying
from ..errors import PrefectApiError, unwrap
from ..messages import RunResult

RETRIED_STATUS = frozenset({408, 423, 429, 500, 502, 503, 504})


class FailedOnTheApi(Exception):
    """A whole run that failed on the API's passing trouble: started again, and when the
    tries run out its result is the run's."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(result.error)
        self.result = result


def is_transient(exc: BaseException) -> bool:
    exc = unwrap(exc)
    if isinstance(exc, PrefectApiError | FailedOnTheApi):
        return True
    if isinstance(exc, PrefectHTTPStatusError | httpx.HTTPStatusError):
        return exc.response.status_code in RETRIED_STATUS
    if isinstance(exc, httpx.TransportError):
        return True
    return "database is locked" in str(exc)


def api_retrying(attempts: int = 4, first_wait: float = 1.0) -> Retrying:
    """Retry what the API's passing trouble failed: a whole run (finished steps replay, so it
    repeats nothing that finished) or one idempotent call. Waits double from ``first_wait``
    seconds, with as much jitter."""
    return Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential_jitter(multiplier=first_wait, max=15, jitter=first_wait),
        retry=retry_if_exception(is_transient),
        reraise=True,
    )
