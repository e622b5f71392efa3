"""An answer to a session of ``nexusflow mcp``'s own agent, taken once however many clients
send it.

The answer goes on in a background process, which takes a second to hold the session; until
it does, a second answer to the same request must be refused at once, from any server on the
same Prefect server. A claim is a Prefect Variable whose name is the session's and request's
digest: the server creates a name once, so of two claims at once one wins. The winner
deletes it once its process holds the session (the session then reads ``running``) or has
failed; a claim whose claimer died on this machine is taken over, so a crash never leaves a
request that can no longer be answered. A claim from another machine is left to its owner.
"""

from __future__ import annotations

from uuid import UUID

from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.actions import VariableCreate
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from pydantic import BaseModel, ValidationError

from .._support.digest import digest
from .._support.liveness import ProcessMark, gone, this_process

PREFIX = "nexusflow-answer-"


class Claim(BaseModel):
    session_id: str
    request_id: str
    process: ProcessMark | None


def claim_name(session_id: str, request_id: str) -> str:
    return f"{PREFIX}{digest(session_id)}-{digest(request_id)}"


def claims_of(session_id: str) -> str:
    """What the names of a session's claims begin with (``forget`` deletes them)."""
    return f"{PREFIX}{digest(session_id)}-"


async def claim(client: PrefectClient, session_id: str, request_id: str) -> UUID | None:
    """The new claim's id; None when a live claimer holds the request."""
    name = claim_name(session_id, request_id)
    mine = Claim(session_id=session_id, request_id=request_id, process=this_process())
    for _ in range(3):
        try:
            made = await client.create_variable(VariableCreate(name=name, value=mine.model_dump(mode="json")))
            return made.id
        except ObjectAlreadyExists:
            found = await client.read_variable_by_name(name)
            if found is None:
                continue  # let go of meanwhile
            try:
                held = Claim.model_validate(found.value)
            except ValidationError:
                return None  # not ours to judge: refused, never deleted
            if not gone(held.process):
                return None
            await release(client, found.id)
    return None


async def release(client: PrefectClient, claim_id: UUID) -> None:
    """By id, never by name: ids are never reused, so a late release never frees a newer claim."""
    try:
        await client.request("DELETE", "/variables/{id}", path_params={"id": claim_id})
    except ObjectNotFound:
        pass
    except Exception as exc:  # the client raises httpx's error for a 404 here
        if getattr(getattr(exc, "response", None), "status_code", None) != 404:
            raise


async def forget_claims(client: PrefectClient, session_id: str) -> int:
    """Every claim left of the session (by a claimer killed before it let go), deleted."""
    response = await client.request(
        "POST", "/variables/filter", json={"variables": {"name": {"like_": claims_of(session_id)}}, "limit": 200}
    )
    found = [UUID(variable["id"]) for variable in response.json()]
    for claim_id in found:
        await release(client, claim_id)
    return len(found)
