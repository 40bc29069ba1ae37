"""Start, pause and resume a persona's training: status transitions under the persona's
row lock. The runner notices them (``wake``) and runs or stops the loop."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.errors import Conflict, Invalid
from llmjudge.personas.lookup import persona_row
from llmjudge.personas.models import Persona, PersonaPair
from llmjudge.personas.schemas import PersonaOut
from llmjudge.personas.service import get_persona


async def _transition(
    db: AsyncSession, persona_id: int, allowed: set[str], to: str, reason: str | None
) -> Persona:
    p = await persona_row(db, persona_id, lock=True)
    if p.status not in allowed:
        raise Conflict(
            f"persona {persona_id} is {p.status}; this needs status {' or '.join(sorted(allowed))}"
        )
    p.status = to
    p.status_reason = reason
    await db.commit()
    return p


async def _check_startable(db: AsyncSession, p: Persona) -> None:
    for role in ("task", "judge", "engineer"):
        if getattr(p, f"{role}_model_id") is None:
            raise Invalid(f"choose a {role} model first")
    opt = await db.scalar(
        select(func.count()).where(
            PersonaPair.persona_id == p.id, PersonaPair.split == "optimisation"
        )
    )
    if not opt:
        raise Invalid("upload training pairs first")


async def start_training(*, db: AsyncSession, persona_id: int) -> PersonaOut:
    await _check_startable(db, await persona_row(db, persona_id))
    await _transition(db, persona_id, {"draft"}, "training", None)
    return await get_persona(db=db, persona_id=persona_id)


async def pause_training(*, db: AsyncSession, persona_id: int) -> PersonaOut:
    await _transition(db, persona_id, {"training"}, "paused", "paused by a user")
    return await get_persona(db=db, persona_id=persona_id)


async def resume_training(*, db: AsyncSession, persona_id: int) -> PersonaOut:
    await _check_startable(db, await persona_row(db, persona_id))
    await _transition(db, persona_id, {"paused"}, "training", None)
    return await get_persona(db=db, persona_id=persona_id)
