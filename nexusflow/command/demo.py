"""``nexusflow demo``."""

from __future__ import annotations

import sys

from .._prefect.server import use_server
from ..client import create_in_process_client
from ..toolkit import Toolkit
from ._shared import checked_session_id, finish


async def demo(*, session: str | None = None) -> int:
    """A multi-step tool-calling run on the scripted model.

    Parameters
    ----------
    session
        Session id; the same id replays the run.
    """
    from ..demo import PROMPT, TOOLS, demo_model

    print(f"nexusflow demo: {PROMPT}", file=sys.stderr)
    client = create_in_process_client(demo_model())
    session_id = checked_session_id(session) if session is not None else None
    use_server()
    async with await Toolkit.load(tools=TOOLS) as toolkit:
        result = await client.run(PROMPT, toolkit, session_id=session_id)
    return await finish(result, client)
