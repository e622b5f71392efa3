"""Budgets over a run tree: what a run, its sub-agents and its fan-out members may spend
together, in dollars or tokens, counted from what each live turn reported.

A run with a budget writes it with its session (``budget.json``); a run nested in it (a
sub-agent, a fan-out member, linked to its parent as it starts: ``memory.Nesting``) finds
it there, so the whole tree shares one budget, and a resumed run
continues the count. What was spent is ``spend.json`` beside it: each live turn adds its
usage once, by its step key, so a replayed turn is never counted twice. Runs of one process
update it under one lock; runs of other processes (Dask workers) read it before each turn,
so they may each overspend by the turns they run at the same moment.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import anyio
from pydantic import BaseModel, Field

from .._prefect.storage import read_record, write_record
from ..errors import BudgetExceeded
from ..messages import Usage
from .store import ancestors


class Budget(BaseModel):
    """What a run tree may spend; None: no bound on that figure."""

    max_cost_usd: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, ge=1)

    @property
    def bounded(self) -> bool:
        return self.max_cost_usd is not None or self.max_tokens is not None


class Spend(BaseModel):
    """What a run tree has spent, and the turns counted in it."""

    usage: Usage = Field(default_factory=Usage)
    turns: list[str] = Field(default_factory=list, description="The step keys of the live turns counted.")


@dataclass(frozen=True)
class Holder:
    """The session whose budget a run spends from (itself or the run it is nested in)."""

    session_id: str
    budget: Budget


_locks: weakref.WeakValueDictionary[str, anyio.Lock] = weakref.WeakValueDictionary()
"""A lock per holder while some run of this process updates its spend: weak, so a process that
serves runs for weeks does not keep one for every session it ever saw."""


def _lock(session_id: str) -> anyio.Lock:
    return _locks.setdefault(session_id, anyio.Lock())


async def set_budget(session_id: str, budget: Budget) -> None:
    """The run's own budget, stored with its session for the runs nested in it and for a resume."""
    await write_record(budget, "sessions", session_id, "budget.json")


async def spends_from(session_id: str, own: Budget) -> Holder | None:
    """The budget a run (or a batch) spends from: the nearest one of its tree, its own first
    (a resume given another budget replaces it), else its own, stored for what nests in it."""
    found = await holder(session_id)
    if own.bounded and (found is None or (found.session_id == session_id and found.budget != own)):
        await set_budget(session_id, own)
        return Holder(session_id, own)
    return found


async def holder(session_id: str) -> Holder | None:
    """The nearest session of the tree, itself first, that has a budget: up the links each
    nested run keeps (``memory.Nesting``), never by the shape of an id."""
    budget = await read_record(Budget, "sessions", session_id, "budget.json")
    if budget is not None and budget.bounded:
        return Holder(session_id, budget)
    for name in await ancestors(session_id):
        budget = await read_record(Budget, "sessions", name, "budget.json")
        if budget is not None and budget.bounded:
            return Holder(name, budget)
    return None


def _over(spent: Usage, budget: Budget) -> str | None:
    if budget.max_cost_usd is not None and (spent.cost_usd or 0.0) >= budget.max_cost_usd:
        return f"${spent.cost_usd or 0:.6g} of ${budget.max_cost_usd:.6g} (max_cost_usd)"
    tokens = spent.tokens or 0
    if budget.max_tokens is not None and tokens >= budget.max_tokens:
        return f"{tokens} of {budget.max_tokens} tokens (max_tokens)"
    return None


async def check(found: Holder) -> None:
    """Before a live turn: the tree has spent less than its budget, or the run stops here."""
    spend = await read_record(Spend, "sessions", found.session_id, "spend.json") or Spend()
    over = _over(spend.usage, found.budget)
    if over is not None:
        raise BudgetExceeded(found.session_id, over)


async def count(found: Holder, key: str, usage: Usage) -> None:
    """After a live turn: its usage joins the tree's, once."""
    async with _lock(found.session_id):
        spend = await read_record(Spend, "sessions", found.session_id, "spend.json") or Spend()
        if key in spend.turns:
            return
        spend = Spend(usage=spend.usage + usage, turns=[*spend.turns, key])
        await write_record(spend, "sessions", found.session_id, "spend.json")


async def spent(session_id: str) -> Usage:
    """What the tree under ``session_id`` has spent by its budget's count."""
    spend = await read_record(Spend, "sessions", session_id, "spend.json")
    return spend.usage if spend is not None else Usage()
