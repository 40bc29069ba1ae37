"""Start, pause and resume a persona's training: status transitions under the persona's
row lock. The runner notices them (``wake``) and runs or stops the loop."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import Conflict, Invalid
from llmjudge.personas.execution import TrainingIn, choose_execution
from llmjudge.personas.lookup import persona_row
from llmjudge.personas.models import Persona, PersonaIteration, PersonaPair
from llmjudge.personas.pairs import assign_splits
from llmjudge.personas.schemas import PersonaOut
from llmjudge.personas.service import get_persona


async def _transition(
    db: AsyncSession,
    persona_id: int,
    allowed: set[str],
    to: str,
    reason: str | None,
    *,
    begin: bool = False,
    choice: TrainingIn | None = None,
) -> Persona:
    """``begin``: a start or resume, which sets the execution ``choice`` asks (None: as
    stored)."""
    p = await persona_row(db, persona_id, lock=True)
    if p.status not in allowed:
        raise Conflict(
            f"persona {persona_id} is {p.status}; this needs status {' or '.join(sorted(allowed))}"
        )
    if begin:
        await choose_execution(db, p, choice)
    p.status = to
    p.status_reason = reason
    await db.commit()
    return p


async def _check_startable(db: AsyncSession, p: Persona) -> None:
    """Every model the loop will call is chosen: the task model only when some pair lacks
    its own answer, the judge and prompt engineer only for an LLM judge."""
    opt, without_answer = (
        await db.execute(
            select(
                func.count().filter(PersonaPair.split == "optimisation"),
                func.count().filter(PersonaPair.answer.is_(None)),
            ).where(PersonaPair.persona_id == p.id)
        )
    ).one()
    roles = ["judge", "engineer"] if p.judge_kind == "llm" else []
    if without_answer:
        roles.insert(0, "task")
    for role in roles:
        if getattr(p, f"{role}_model_id") is None:
            why = f" ({without_answer} pair(s) have no answer)" if role == "task" else ""
            raise Invalid(f"choose a {role} model first{why}")
    if not opt:
        raise Invalid("upload training pairs first")


async def _resplit_if_two_way(db: AsyncSession, p: Persona) -> None:
    """A draft stored before the three splits has no calibration pairs: split it again
    (nothing was measured on it yet, so no history depends on its old split)."""
    if p.holdout_fraction <= 0:
        return
    iterations = await db.scalar(select(func.count()).where(PersonaIteration.persona_id == p.id))
    calibration = await db.scalar(
        select(func.count()).where(
            PersonaPair.persona_id == p.id, PersonaPair.split == "calibration"
        )
    )
    if not iterations and not calibration:
        await assign_splits(db, p, only=None)
        await db.commit()


async def start_training(
    *, db: AsyncSession, persona_id: int, choice: TrainingIn | None = None
) -> PersonaOut:
    p = await persona_row(db, persona_id)
    await _check_startable(db, p)
    await _resplit_if_two_way(db, p)
    await _transition(
        db, persona_id, {"draft"}, "training", None, begin=True, choice=choice or TrainingIn()
    )
    return await get_persona(db=db, persona_id=persona_id)


async def pause_training(*, db: AsyncSession, persona_id: int) -> PersonaOut:
    await _transition(db, persona_id, {"training"}, "paused", "paused by a user")
    return await get_persona(db=db, persona_id=persona_id)


async def resume_training(
    *, db: AsyncSession, persona_id: int, choice: TrainingIn | None = None
) -> PersonaOut:
    await _check_startable(db, await persona_row(db, persona_id))
    await _transition(db, persona_id, {"paused"}, "training", None, begin=True, choice=choice)
    return await get_persona(db=db, persona_id=persona_id)
