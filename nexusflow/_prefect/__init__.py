"""Prefect's edge: the API clients, which server a process uses, result storage, locks that
exist only while held, a session's lock, global concurrency limits, and which API failures
pass. Every private Prefect name nexusflow depends on is reached from here; README.md is its
ledger."""
