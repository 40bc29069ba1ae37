"""Persona summaries for the list and comparison pages (and their /api twins): latest
metrics, iteration count and training cost, in four queries whatever the number of
personas; the list page's filter."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.db.rows import columns
from llmjudge.infra.errors import NotFound
from llmjudge.personas.models import Persona, PersonaIteration
from llmjudge.personas.schemas import MetricsOut, deprecated_alias
from llmjudge.providers import LLMCall

MAX_COMPARE = 20


class PersonaSummary(BaseModel):
    id: int
    name: str
    description: str
    status: str
    target_f1: float
    created_at: datetime
    iterations: int
    scored_iteration: int | None = Field(description="latest iteration with metrics")
    prompt_version: int
    optimisation: MetricsOut | None = Field(description="agreement on the optimisation pairs")
    selection: MetricsOut | None = Field(description="agreement on the selection pairs")
    cost_usd: float = Field(description="spent on training calls")

    @deprecated_alias("selection")
    @property
    def holdout(self) -> MetricsOut | None:
        return self.selection


async def summaries(*, db: AsyncSession, ids: Sequence[int] | None = None) -> list[PersonaSummary]:
    """Personas (all, or ``ids`` in that order) with their latest metrics, iteration count
    and training cost, in four queries whatever their number."""
    stmt = select(Persona).order_by(Persona.name)
    if ids is not None:
        stmt = stmt.where(Persona.id.in_(list(ids)))
    personas = list(await db.scalars(stmt))
    if ids is not None:
        found = {p.id: p for p in personas}
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFound(f"persona(s) {', '.join(map(str, missing))} not found")
        personas = [found[i] for i in ids]
    wanted = [p.id for p in personas]
    latest = {
        row.persona_id: row
        for row in (
            await db.execute(
                select(
                    PersonaIteration.persona_id,
                    PersonaIteration.number,
                    PersonaIteration.metrics_optimisation,
                    PersonaIteration.metrics_selection,
                )
                .where(
                    PersonaIteration.persona_id.in_(wanted),
                    PersonaIteration.metrics_optimisation.is_not(None)
                    | PersonaIteration.metrics_selection.is_not(None),
                )
                .ext(distinct_on(PersonaIteration.persona_id))
                .order_by(PersonaIteration.persona_id, PersonaIteration.number.desc())
            )
        ).all()
    }
    counts = dict(
        (
            await db.execute(
                select(PersonaIteration.persona_id, func.count())
                .where(PersonaIteration.persona_id.in_(wanted))
                .group_by(PersonaIteration.persona_id)
            )
        ).all()
    )
    costs = dict(
        (
            await db.execute(
                select(LLMCall.persona_id, func.coalesce(func.sum(LLMCall.cost_usd), 0.0))
                .where(LLMCall.persona_id.in_(wanted))
                .group_by(LLMCall.persona_id)
            )
        ).all()
    )
    out = []
    for p in personas:
        row = latest.get(p.id)
        out.append(
            PersonaSummary.model_validate(
                columns(p)
                | {
                    "iterations": counts.get(p.id, 0),
                    "scored_iteration": None if row is None else row.number,
                    "prompt_version": p.current_version,
                    "optimisation": None if row is None else _metrics(row.metrics_optimisation),
                    "selection": None if row is None else _metrics(row.metrics_selection),
                    "cost_usd": float(costs.get(p.id, 0.0)),
                }
            )
        )
    return out


def matching(
    rows: Sequence[PersonaSummary], *, status: str | None = None, q: str | None = None
) -> list[PersonaSummary]:
    """The list page's filter: one status, and a case-insensitive part of the name."""
    needle = (q or "").strip().casefold()
    return [
        r
        for r in rows
        if (not status or r.status == status) and (not needle or needle in r.name.casefold())
    ]


def _metrics(m: dict[str, Any] | None) -> MetricsOut | None:
    return None if m is None else MetricsOut.model_validate(m)
