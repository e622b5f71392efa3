"""Output types for typed runs, in a file with postponed annotations: a dataclass here
resolves its fields through its module, which must be importable by name."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel


class Report(BaseModel):
    title: str
    severity: int


@dataclass
class Point:
    x: int
    y: int


LIMIT = 3
