"""The words of what a user configures: a refused argument, option or setting, a tool spec
that cannot be imported, an output type, a subscription limit.

``argument_wrong`` and ``option_refused`` are the one wording of a refused argument on every
floor above (the toolkit, ``ops``, the client, ``testing``): a public call refuses what it
cannot use where it is given, in one line naming the call and the argument.
"""

from __future__ import annotations

from ..errors import ArgumentError, OutputError, SubscriptionLimitError, ToolkitError


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def argument_wrong(where: str, argument: str, expected: str, value: object) -> ArgumentError:
    return ArgumentError(f"{where}: {argument} must be {expected}, not {_shown(value)}", argument)


def option_refused(where: str, option: str, why: str, value: object) -> ArgumentError:
    return ArgumentError(f"{where}: {option}: {why}, not {_shown(value)}", option)


def setting_refused(variable: str, why: str, value: object) -> ArgumentError:
    return ArgumentError(f"{variable}: {why}, not {_shown(value)}", variable)


def setting_not_a_pattern_list() -> ValueError:
    """Raised in a settings validator: ``setting_refused`` quotes it with the variable's name."""
    return ValueError("not a JSON list of regular expressions")


def option_unknown(where: str, option: str, known: list[str]) -> ArgumentError:
    return ArgumentError(f"{where}: {option} is not an option (the options: {', '.join(sorted(known))})", option)


def tool_steps_take_no_retries() -> ValueError:
    """Raised in ``TaskConfig``'s validator: pydantic reports it, ``option_refused`` quotes it."""
    return ValueError(
        "tool steps take no Prefect retries: a tool may have side effects; "
        "use ToolPolicy(retries=...) for errors that say nothing happened"
    )


def wait_steps_take_no_retries() -> ValueError:
    """Raised in ``TaskConfig``'s validator, as ``tool_steps_take_no_retries``."""
    return ValueError("wait steps take no Prefect retries: a retried wait would ask a person again")


def tools_no_such_file(name: str) -> ToolkitError:
    return ToolkitError(f"tools: no such file: {name}")


def tools_spec_malformed(spec: str) -> ToolkitError:
    return ToolkitError(f"tools: expected module:function or file.py:function, got {spec!r}")


def tools_import_failed(module: str, exc: BaseException) -> ToolkitError:
    return ToolkitError(f"tools: cannot import {module}: {type(exc).__name__}: {exc}")


def tools_no_attribute(module: str, attribute: str) -> ToolkitError:
    return ToolkitError(f"tools: {module} has no {attribute!r}")


def output_unusable(type_name: str, why: str) -> OutputError:
    return OutputError(f"output: {type_name} cannot be an output type: {why}")


def output_not_importable(spec: str, exc: ToolkitError) -> OutputError:
    return output_unusable(spec, str(exc).removeprefix("tools: "))


def limit_name_invalid(name: object) -> SubscriptionLimitError:
    return SubscriptionLimitError(f"limit: invalid name {name!r}: use 1-100 letters, digits, '-' or '_'")


def limit_without_bounds(name: str) -> SubscriptionLimitError:
    return SubscriptionLimitError(f'limit "{name}": give max_concurrent, per_minute or both')


def limit_concurrency_invalid(name: str, value: object) -> SubscriptionLimitError:
    return SubscriptionLimitError(f'limit "{name}": max_concurrent must be a positive integer, not {value!r}')


def limit_rate_invalid(name: str, value: object) -> SubscriptionLimitError:
    return SubscriptionLimitError(f'limit "{name}": per_minute must be a positive number, not {value!r}')


def limit_without_name() -> SubscriptionLimitError:
    return SubscriptionLimitError("limit: max_concurrent and per_minute need a limit name (limit=...)")
