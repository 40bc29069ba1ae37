"""Iterations as read by pages and the API: their status, metrics, review progress and
cost, and the persona's training status."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.db.rows import columns
from llmjudge.personas.lookup import persona_row, rows_in_order
from llmjudge.personas.models import PersonaDecision, PersonaIteration
from llmjudge.personas.schemas import IterationOut, MetricsOut, TrainingStatusOut
from llmjudge.providers import totals


def metrics_out(m: dict[str, Any] | None) -> MetricsOut | None:
    return None if m is None else MetricsOut.model_validate(m)


async def review_counts(db: AsyncSession, iteration_ids: Sequence[int]) -> dict[int, Any]:
    """iteration id -> (decisions, pending review), in one query."""
    rows = await db.execute(
        select(
            PersonaDecision.iteration_id,
            func.count(),
            func.count().filter(PersonaDecision.human_agrees.is_(None)),
        )
        .where(PersonaDecision.iteration_id.in_(list(iteration_ids)))
        .group_by(PersonaDecision.iteration_id)
    )
    return {iteration_id: (total, pending) for iteration_id, total, pending in rows.all()}


def iteration_out(it: PersonaIteration, counts: tuple[int, int]) -> IterationOut:
    return IterationOut.model_validate(
        columns(it)
        | {
            "metrics_optimisation": metrics_out(it.metrics_optimisation),
            "metrics_selection": metrics_out(it.metrics_selection),
            "metrics_calibration": metrics_out(it.metrics_calibration),
            "timings": dict(it.timings or {}),
            "decisions": counts[0],
            "pending_review": counts[1],
        }
    )


async def iterations_in_order(db: AsyncSession, persona_id: int) -> Sequence[PersonaIteration]:
    """The persona's iterations, first first."""
    return await rows_in_order(db, PersonaIteration, persona_id, PersonaIteration.number)


async def list_iterations(*, db: AsyncSession, persona_id: int) -> list[IterationOut]:
    await persona_row(db, persona_id)
    iterations = await iterations_in_order(db, persona_id)
    counts = await review_counts(db, [it.id for it in iterations])
    return [iteration_out(it, counts.get(it.id, (0, 0))) for it in iterations]


async def spent_usd(*, db: AsyncSession, persona_id: int) -> float:
    return float((await totals(db=db, persona_id=persona_id))["cost_usd"])


async def training_status(
    *, db: AsyncSession, persona_id: int, running_here: bool = False
) -> TrainingStatusOut:
    p = await persona_row(db, persona_id)
    it = await db.scalar(
        select(PersonaIteration)
        .where(PersonaIteration.persona_id == persona_id)
        .order_by(PersonaIteration.number.desc())
        .limit(1)
    )
    return TrainingStatusOut(
        persona_id=persona_id,
        status=p.status,  # type: ignore[arg-type]
        status_reason=p.status_reason,
        iteration=None
        if it is None
        else iteration_out(it, (await review_counts(db, [it.id])).get(it.id, (0, 0))),
        spent_usd=await spent_usd(db=db, persona_id=persona_id),
        budget_usd=p.budget_usd,
        running_here=running_here,
    )
