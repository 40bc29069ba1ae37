"""The rows every persona service starts from: a persona (optionally locked) and one of its
iterations, or ``NotFound``."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import NotFound
from llmjudge.personas.models import Persona, PersonaIteration


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
