"""Inter-annotator agreement of a persona's uploaded labels, beside the judge's kappa.

When several people labelled the same answers, their agreement with each other (Cohen's
kappa per pair of annotators, Fleiss' kappa over all, each with a bootstrap interval over
the pairs, from ``core.agreement.people.human_agreement``) is the ceiling a judge can be
expected to reach: a judge cannot agree with "the human" more than humans agree.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.agreement.labels import Estimate
from llmjudge.core.agreement.people import human_agreement
from llmjudge.personas.lookup import persona_row
from llmjudge.personas.models import PersonaIteration
from llmjudge.personas.pairs import pair_labels
from llmjudge.personas.schemas import IntervalOut

# The analysis module codes labels as pairwise sides; a binary label maps onto two of them.
_CODE = {True: "A", False: "B"}


class KappaOut(BaseModel):
    value: float | None = Field(description="None when undefined (one class only)")
    low: float | None
    high: float | None
    n: int


def _kappa(e: Estimate) -> KappaOut:
    return KappaOut(value=e.value, low=e.low, high=e.high, n=e.n)


class PairKappaOut(BaseModel):
    a: str
    b: str
    kappa: KappaOut = Field(description="Cohen's kappa on the answers both labelled")


class AgreementOut(BaseModel):
    annotators: list[str]
    labelled_pairs: int = Field(description="pairs with at least one uploaded label")
    multiply_labelled: int = Field(description="pairs labelled by two or more annotators")
    pairwise: list[PairKappaOut] = Field(description="Cohen's kappa per pair of annotators")
    fleiss_kappa: KappaOut | None = Field(description="over the multiply labelled pairs")
    metrics_use: str = Field(description="whose labels the metrics use")
    judge_kappa: IntervalOut | None = Field(
        description="the judge's kappa against those labels on the latest selection split"
    )


async def agreement(*, db: AsyncSession, persona_id: int) -> AgreementOut:
    p = await persona_row(db, persona_id)
    labels = await pair_labels(db, persona_id)
    coded = {pid: {who: _CODE[v] for who, v in given.items()} for pid, given in labels.items()}
    people = human_agreement(coded) if coded else None
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
    annotators = sorted({who for given in labels.values() for who in given})
    return AgreementOut(
        annotators=annotators,
        labelled_pairs=len(labels),
        multiply_labelled=people.items if people else 0,
        pairwise=[
            PairKappaOut(a=pair.first, b=pair.second, kappa=_kappa(pair.kappa))
            for pair in (people.pairwise if people else ())
        ],
        fleiss_kappa=_kappa(people.fleiss_kappa) if people and people.items else None,
        metrics_use=p.metrics_annotator or "the majority of the annotators",
        judge_kappa=judge,
    )
