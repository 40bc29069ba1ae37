"""The rows every persona service starts from: a persona (optionally locked) and one of its
iterations, or ``NotFound``; and the rows of one of a persona's tables in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import NotFound
from llmjudge.personas.models import Persona, PersonaIteration

# A table whose rows belong to one persona through their ``persona_id`` column.
_Owned = TypeVar("_Owned")


async def persona_row(db: AsyncSession, persona_id: int, *, lock: bool = False) -> Persona:
    stmt = select(Persona).where(Persona.id == persona_id)
    if lock:
        stmt = stmt.with_for_update()
    p = await db.scalar(stmt)
    if p is None:
        raise NotFound(f"persona {persona_id} not found")
    return p


async def iteration_row(db: AsyncSession, persona_id: int, number: int) -> PersonaIteration:
    it = await db.scalar(
        select(PersonaIteration).where(
            PersonaIteration.persona_id == persona_id, PersonaIteration.number == number
        )
    )
    if it is None:
        raise NotFound(f"persona {persona_id} has no iteration {number}")
    return it


async def rows_in_order(
    db: AsyncSession, table: type[_Owned], persona_id: int, *order_by: Any
) -> Sequence[_Owned]:
    """All of a persona's rows of ``table``, sorted by ``order_by``."""
    owner = table.persona_id  # type: ignore[attr-defined]  # each such table has it
    rows = await db.scalars(select(table).where(owner == persona_id).order_by(*order_by))
    return rows.all()
