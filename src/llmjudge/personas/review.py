"""The human review of an iteration's decisions: the review order (ONE rule, for the API
and the review page), where a reviewer is in it, and recording reviews."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.db.rows import columns
from llmjudge.infra.errors import Conflict, Invalid, NotFound
from llmjudge.personas.lookup import iteration_row, persona_row
from llmjudge.personas.models import PersonaDecision, PersonaIteration, PersonaPair, TaskOutput
from llmjudge.personas.schemas import (
    BulkFeedbackIn,
    BulkFeedbackOut,
    DecisionOut,
    FeedbackIn,
    ReviewQueueOut,
)

# Below this judge confidence a pre-filled decision is flagged for a person to check.
LOW_CONFIDENCE = 0.6

# -- the review order (pure) -------------------------------------------------------------

ReviewOrder = Literal["pending_first", "stable"]


def review_order(
    decisions: Sequence[DecisionOut], order: ReviewOrder = "stable"
) -> list[DecisionOut]:
    """The one review order: the judge's least confident decisions first (those without a
    confidence after the rest), optimisation pairs before selection and calibration ones, ties in the order
    given (``list_decisions`` gives pair order). On top of that:

    - ``pending_first`` (the API's default, a work queue): unreviewed decisions first;
    - ``stable`` (the review page): pre-labelled carried-forward decisions last, and a
      decision never moves once reviewed, so previous / next stay where the reviewer left
      them.

    Decisions pre-filled from uploaded labels that a person should still check (the judge
    disagrees with the label, or is not confident) come before the other reviewed ones.
    """

    def key(d: DecisionOut) -> tuple[bool, bool, bool, float, bool]:
        first = d.human_agrees is not None if order == "pending_first" else d.carried_forward
        return (
            first,
            not d.to_check,
            d.judge_confidence is None,
            d.judge_confidence or 0.0,
            d.split != "optimisation",
        )

    return sorted(decisions, key=key)


@dataclass(frozen=True)
class ReviewState:
    decisions: list[DecisionOut]
    current: DecisionOut | None
    index: int
    reviewed: int
    agreed: int

    @property
    def total(self) -> int:
        return len(self.decisions)

    @property
    def done(self) -> bool:
        return self.total > 0 and self.reviewed == self.total

    def _at(self, i: int) -> DecisionOut | None:
        return self.decisions[i] if 0 <= i < self.total else None

    @property
    def previous(self) -> DecisionOut | None:
        return self._at(self.index - 1)

    @property
    def next(self) -> DecisionOut | None:
        return self._at(self.index + 1)

    @property
    def next_pending(self) -> DecisionOut | None:
        """The first undecided one after the current, wrapping around; None when all are."""
        n = self.total
        for step in range(1, n + 1):
            d = self.decisions[(self.index + step) % n]
            if d.human_agrees is None:
                return d
        return None


def review_state(decisions: Sequence[DecisionOut], decision_id: int | None) -> ReviewState:
    """Where the reviewer is: the asked decision, else the first undecided, else the first.
    ``decisions`` in pair order or already in the stable order."""
    ordered = review_order(decisions, "stable")
    index = next((i for i, d in enumerate(ordered) if d.id == decision_id), None)
    if index is None:
        index = next((i for i, d in enumerate(ordered) if d.human_agrees is None), 0)
    return ReviewState(
        decisions=ordered,
        current=ordered[index] if ordered else None,
        index=index,
        reviewed=sum(1 for d in ordered if d.human_agrees is not None),
        agreed=sum(1 for d in ordered if d.human_agrees),
    )


# -- reading and recording reviews ---------------------------------------------------------


def _decision_out(d: PersonaDecision, pair: PersonaPair, answer: str) -> DecisionOut:
    return DecisionOut.model_validate(
        columns(d)
        | {
            "input": pair.input,
            "input_b": pair.input_b,
            "correct_output": pair.correct_output,
            "answer": answer,
            "system": pair.system,
            "to_check": d.prefilled
            and (d.human_agrees is False or (d.judge_confidence or 0.0) < LOW_CONFIDENCE),
        }
    )


async def list_decisions(
    *,
    db: AsyncSession,
    persona_id: int,
    number: int,
    pending_only: bool = False,
    split: Literal["optimisation", "selection", "calibration"] | None = None,
    order: ReviewOrder = "pending_first",
) -> list[DecisionOut]:
    """Decisions of iteration ``number`` in review order (see ``review_order``)."""
    await persona_row(db, persona_id)
    it = await iteration_row(db, persona_id, number)
    stmt = (
        select(PersonaDecision, PersonaPair, TaskOutput.output)
        .join(PersonaPair, PersonaPair.id == PersonaDecision.pair_id)
        .join(TaskOutput, TaskOutput.id == PersonaDecision.output_id)
        .where(PersonaDecision.iteration_id == it.id)
    )
    if pending_only:
        stmt = stmt.where(PersonaDecision.human_agrees.is_(None))
    if split is not None:
        stmt = stmt.where(PersonaDecision.split == split)
    # Pair (upload) order: review_order's sort is stable, so it breaks every tie.
    rows = await db.execute(stmt.order_by(PersonaPair.position))
    decisions = [_decision_out(d, pair, answer) for d, pair, answer in rows.all()]
    return review_order(decisions, order)


async def review_position(
    *, db: AsyncSession, persona_id: int, number: int, decision_id: int | None = None
) -> ReviewState:
    """Where a reviewer of iteration ``number`` is, in the stable order: the asked decision
    (else the first undecided, else the first), its neighbours and the counts."""
    decisions = await list_decisions(db=db, persona_id=persona_id, number=number, order="stable")
    return review_state(decisions, decision_id)


async def review_queue(
    *, db: AsyncSession, persona_id: int, number: int, decision_id: int | None = None
) -> ReviewQueueOut:
    """``review_position`` as the API answers it."""
    state = await review_position(
        db=db, persona_id=persona_id, number=number, decision_id=decision_id
    )

    def id_of(d: DecisionOut | None) -> int | None:
        return None if d is None else d.id

    return ReviewQueueOut.model_validate(
        vars(state)
        | {
            "iteration": number,
            "current_id": id_of(state.current),
            "previous_id": id_of(state.previous),
            "next_id": id_of(state.next),
            "next_pending_id": id_of(state.next_pending),
            "total": state.total,
        }
    )


async def _apply_feedback(
    db: AsyncSession,
    persona_id: int,
    decision_ids: Sequence[int],
    agrees: bool,
    notes: str | None,
    number: int | None = None,
    reviewer: str | None = None,
    bulk: bool = False,
) -> tuple[int, int, int]:
    """(updated, pending left, iteration number). Reviews are accepted only while the
    decision's iteration awaits review: later they would change metrics already used."""
    # Locks the iteration row, as scoring does: a review either counts or is refused.
    rows = (
        await db.execute(
            select(PersonaDecision.id, PersonaIteration.status, PersonaIteration.number)
            .join(PersonaIteration, PersonaIteration.id == PersonaDecision.iteration_id)
            .where(PersonaDecision.persona_id == persona_id, PersonaDecision.id.in_(decision_ids))
            .with_for_update(of=PersonaIteration)
        )
    ).all()
    found = {r.id for r in rows}
    missing = sorted(set(decision_ids) - found)
    if missing:
        raise NotFound(
            f"decision(s) {', '.join(map(str, missing[:20]))} not found in persona {persona_id}"
        )
    numbers = {r.number for r in rows}
    if number is not None and numbers != {number}:
        raise Invalid(f"all decisions must belong to iteration {number}")
    if len(numbers) != 1:
        raise Invalid("all decisions must belong to one iteration")
    if any(r.status != "awaiting_review" for r in rows):
        raise Conflict("this iteration is not awaiting review; its metrics are final")
    iteration = numbers.pop()
    await db.execute(
        update(PersonaDecision)
        .where(PersonaDecision.id.in_(found))
        .values(
            human_agrees=agrees,
            human_notes=notes.strip() if notes and notes.strip() else None,
            reviewed_at=func.now(),
            reviewed_by=reviewer,
            carried_forward=False,
            # one click over many decisions agrees without checking each: marked, so a
            # persona measured mostly on such labels is flagged (convergence.bulk_summary)
            bulk=bulk,
            prefilled=False,
        )
    )
    pending = await db.scalar(
        select(func.count())
        .select_from(PersonaDecision)
        .join(PersonaIteration, PersonaIteration.id == PersonaDecision.iteration_id)
        .where(
            PersonaIteration.persona_id == persona_id,
            PersonaIteration.number == iteration,
            PersonaDecision.human_agrees.is_(None),
        )
    )
    await db.commit()
    return len(found), pending or 0, iteration


async def feedback(
    *,
    db: AsyncSession,
    persona_id: int,
    decision_id: int,
    data: FeedbackIn,
    reviewer: str | None = None,
) -> tuple[DecisionOut, int]:
    """Record one review; returns the decision and how many of its iteration still wait."""
    _, pending, _ = await _apply_feedback(
        db, persona_id, [decision_id], data.agrees, data.notes, reviewer=reviewer
    )
    d, pair, answer = (
        await db.execute(
            select(PersonaDecision, PersonaPair, TaskOutput.output)
            .join(PersonaPair, PersonaPair.id == PersonaDecision.pair_id)
            .join(TaskOutput, TaskOutput.id == PersonaDecision.output_id)
            .where(PersonaDecision.id == decision_id)
        )
    ).one()
    return _decision_out(d, pair, answer), pending


async def bulk_feedback(
    *,
    db: AsyncSession,
    persona_id: int,
    number: int,
    data: BulkFeedbackIn,
    reviewer: str | None = None,
) -> BulkFeedbackOut:
    await iteration_row(db, persona_id, number)
    updated, pending, _ = await _apply_feedback(
        db,
        persona_id,
        data.decision_ids,
        data.agrees,
        data.notes,
        number,
        reviewer,
        bulk=len(set(data.decision_ids)) > 1,
    )
    return BulkFeedbackOut(updated=updated, pending_review=pending)
