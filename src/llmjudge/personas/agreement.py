"""Inter-annotator agreement of a persona's uploaded labels, beside the judge's kappa.

When several people labelled the same answers, their agreement with each other (Cohen's
kappa per pair of annotators, Fleiss' kappa over all) is the ceiling a judge can be
expected to reach: a judge cannot agree with "the human" more than humans agree.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.personas.lookup import persona_row
from llmjudge.personas.metrics import annotator_agreement
from llmjudge.personas.models import PersonaIteration
from llmjudge.personas.pairs import pair_labels
from llmjudge.personas.schemas import IntervalOut


class PairKappaOut(BaseModel):
    a: str
    b: str
    kappa: float
    n: int = Field(description="answers both annotators labelled")


class AgreementOut(BaseModel):
    annotators: list[str]
    labelled_pairs: int = Field(description="pairs with at least one uploaded label")
    multiply_labelled: int = Field(description="pairs labelled by two or more annotators")
    pairwise: list[PairKappaOut] = Field(description="Cohen's kappa per pair of annotators")
    fleiss_kappa: float | None = Field(description="over the multiply labelled pairs")
    metrics_use: str = Field(description="whose labels the metrics use")
    judge_kappa: IntervalOut | None = Field(
        description="the judge's kappa against those labels on the latest selection split"
    )


async def agreement(*, db: AsyncSession, persona_id: int) -> AgreementOut:
    p = await persona_row(db, persona_id)
    labels = await pair_labels(db, persona_id)
    a = annotator_agreement(labels)
    latest = await db.scalar(
        select(PersonaIteration.metrics_selection)
        .where(
            PersonaIteration.persona_id == persona_id,
            PersonaIteration.metrics_selection.is_not(None),
        )
        .order_by(PersonaIteration.number.desc())
        .limit(1)
    )
    judge = None
    if latest and (latest.get("intervals") or {}).get("kappa"):
        judge = IntervalOut.model_validate(latest["intervals"]["kappa"])
    return AgreementOut(
        annotators=list(a.annotators),
        labelled_pairs=len(labels),
        multiply_labelled=a.items,
        pairwise=[PairKappaOut(a=x, b=y, kappa=k, n=n) for x, y, k, n in a.pairwise],
        fleiss_kappa=a.fleiss if a.items else None,
        metrics_use=p.metrics_annotator or "the majority of the annotators",
        judge_kappa=judge,
    )
