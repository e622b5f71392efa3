"""The run's flow's words: an answer that never matched its output type, tool calls past
``max_tool_calls``, inputs missing from storage, and the state of a run a signal ended."""

from __future__ import annotations

from ..errors import OutputError, StorageError


def output_mismatch(type_name: str, repairs: int, errors: str) -> OutputError:
    return OutputError(f"output: the final answer does not match {type_name} after {repairs} repairs: {errors}")


def tool_error_not_run(name: str, calls: int, limit: int) -> str:
    """A call past ``max_tool_calls`` in one reply: answered without a task run of its own."""
    return (
        f'error: tool "{name}" was not run: the reply asked for {calls} tool calls, and at most {limit} run per'
        " reply (max_tool_calls); ask again for those still needed"
    )


def storage_inputs_missing(reference: str, session_id: str) -> StorageError:
    return StorageError(f'storage: the inputs "{reference}" of session "{session_id}" are not in result storage')


# Honest states (issue 42): the messages a run's Prefect state carries when nexusflow, not
# Prefect's engine, ends it.
def cancelled_by_signal(session_id: str, signal_name: str) -> str:
    return (
        f'nexusflow: session "{session_id}": interrupted by {signal_name};'
        " it goes on from its finished steps when run again"
    )
