"""``nexusflow.testing``'s words: the scripted model and its server, ``export_cassette``
and ``crash_at_every_step``."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ..errors import CassetteExportError, CrashTestError, ModelError


def scripted_model_has_no_reply(turn: int, scripted: int) -> ModelError:
    return ModelError(f"model: the scripted model has no reply for turn {turn} ({scripted} scripted)")


def scripted_call_not_json(exc: json.JSONDecodeError) -> ModelError:
    return ModelError(f"model: a `call` line's arguments are not JSON: {exc.msg}")


def no_scripted_recipe(style: str) -> ValueError:
    """``nexusflow.testing``: a style its scripted model server cannot stand in for."""
    return ValueError(f"no scripted-server recipe for style {style}")


def scripted_server_not_started() -> RuntimeError:
    return RuntimeError("the scripted model server did not start")


def export_no_session(session_id: str) -> CassetteExportError:
    return CassetteExportError(f"cassette export: no session {session_id!r} in the result storage")


def export_running(session_id: str, flow_run_id: str | None) -> CassetteExportError:
    run = f" (flow run {flow_run_id})" if flow_run_id else ""
    return CassetteExportError(
        f"cassette export: session {session_id!r} is running{run}; export it once its run has ended"
    )


def export_no_turns(session_id: str) -> CassetteExportError:
    return CassetteExportError(f"cassette export: session {session_id!r} has no finished turn to export")


def export_no_request(session_id: str, step: int) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} was stored without its request (by an earlier"
        " nexusflow); run the session again to export it"
    )


def export_hooked(session_id: str, step: int, hook: str) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} was changed by its {hook} hook; its record holds"
        " what the hook was given, not what the model was asked or said"
    )


def export_acp_steps(session_id: str, step: int) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} holds an ACP agent's own tool calls, but the"
        " session kept no agent session of its own client (a fallback's agent answered it)"
    )


def export_acp_style(session_id: str, style: str | None, found: int) -> CassetteExportError:
    """The ACP session's style is found by its name: none of the built-in names (or the one
    given) fits, or several do."""
    if style is not None:
        why = f"its client's style is not {style!r}"
    elif found:
        why = "its clients had more than one style; name the one to export (--style NAME)"
    else:
        why = "its client's style is none of the built-in ones; name it (--style NAME)"
    return CassetteExportError(f"cassette export: session {session_id!r} ran on ACP and {why}")


def export_acp_answered_by(session_id: str, step: int, client: str) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} was answered by the fallback client {client!r};"
        " an exported ACP session replays its own client's agent"
    )


def export_acp_tool_unstored(session_id: str, step: int, tool: str) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: turn {step} of session {session_id!r} called {tool}, whose record is not in the result"
        " storage; the exported agent could not say what it received"
    )


def export_ambiguous(session_id: str, step: int) -> CassetteExportError:
    return CassetteExportError(
        f"cassette export: session {session_id!r} holds the turns of more than one run from turn {step} on (its"
        " prompt or settings changed between runs); forget it and run it again to export one"
    )


def crash_uninterrupted_failed(program: str, ended: str, stderr: str) -> CrashTestError:
    return CrashTestError(f"crash test of {program}: the uninterrupted run {ended}:\n{stderr}")


def crash_no_steps(program: str) -> CrashTestError:
    return CrashTestError(
        f"crash test of {program}: the uninterrupted run stored no step record (it runs no agent of nexusflow's)"
    )


def crash_boundary(killed_after: int, steps: int, step: str | None) -> str:
    """Where a run was killed: before its first step, or once its k-th step record was stored."""
    if killed_after == 0:
        return "before the first step"
    return f"after step {killed_after} of {steps} ({step})"


def crash_ended(code: int | None, timeout: float) -> str:
    """How a process ended; ``None``: it was stopped after ``timeout`` seconds."""
    if code is None:
        return f"did not end within {timeout:g}s"
    if code < 0:
        return f"was killed by signal {-code}"
    return f"exited with {code}"


def crash_not_killed(ended: str, stored: int) -> str:
    return f"it was not killed there: it {ended} with {stored} step record{'s' if stored != 1 else ''} stored"


def crash_resume_failed(ended: str, stderr: str) -> str:
    return f"the resume {ended}:\n{stderr}"


def crash_ran_again(steps: Iterable[str]) -> str:
    return f"the resume ran again what was stored before the kill: {', '.join(steps)}"


def crash_tools_again(tools: Iterable[str]) -> str:
    return (
        "a tool ran more often than in the uninterrupted run, beyond the calls in flight at the kill:"
        f" {', '.join(tools)}"
    )


def crash_output_differs(expected: str, got: str) -> str:
    return f"the resumed run printed {got[-500:]!r} where the uninterrupted run printed {expected[-500:]!r}"
