"""Text that messages on several floors quote the same way: pydantic's errors on one line,
a size limit. No sentence of a message is here, only how a value is shown in one."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


def problems(exc: ValidationError, root: str = "(root)") -> str:
    """Pydantic's errors on one line: each one's place and what is wrong there."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or root}: {err['msg']}" for err in exc.errors(include_input=False)
    )


def shown_size(limit: int) -> str:
    """A size limit in bytes, as MiB when it is whole MiB."""
    return f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"
