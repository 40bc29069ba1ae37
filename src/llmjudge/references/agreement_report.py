"""A session's agreement report: its completed comparisons against reference labels.

Loads the comparisons and the labels of the pairs they compare, maps each comparison to
the pair's canonical order (a comparison that showed the higher thread id first is the pair
swapped), and hands everything to the pure :mod:`llmjudge.core.agreement.judges`; the
bootstrap runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ARRAY, FromClause, Integer, and_, any_, cast, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import Pillar, Thread
from llmjudge.core.agreement import confidence, people
from llmjudge.core.agreement import judges as core
from llmjudge.infra.errors import Invalid, NotFound
from llmjudge.references.models import ReferenceLabel
from llmjudge.references.schemas import (
    AnnotatorPairOut,
    DisagreementOut,
    FigureOut,
    GroupAgreementOut,
    HumanAgreementOut,
    JudgeAgreementOut,
    SessionAgreementOut,
    StatedConfidenceOut,
)
from llmjudge.references.service import session_pairs
from llmjudge.sessions import Comparison, JudgeSession

__all__ = ["DISAGREEMENTS_SHOWN", "GROUP_ROUNDS", "session_agreement"]

DISAGREEMENTS_SHOWN = 200
# Bootstrap rounds per breakdown group: a session may have hundreds of pillar pairs, and a
# group's interval is a guide, not the headline (the whole session's figures use the full
# DEFAULT_ROUNDS). 25k pairs in 961 pillar-pair groups: the whole report took 6 s with
# 1,000 rounds per group, 2.7 s with 200 (bench/agreement.py).
GROUP_ROUNDS = 200


def _estimate(e: core.Estimate) -> FigureOut:
    return FigureOut(value=e.value, n=e.n, low=e.low, high=e.high)


def _judge_out(r: core.AgreementReport) -> dict[str, Any]:
    return {
        "judgments": r.judgments,
        "pairs": r.pairs,
        "accuracy": _estimate(r.accuracy),
        "accuracy_without_ties": _estimate(r.accuracy_without_ties),
        "both_orders_correct": _estimate(r.both_orders_correct),
        "net_vote": _estimate(r.net_vote),
        "consistency": _estimate(r.consistency),
        "kappa": _estimate(r.kappa),
        "precision": _estimate(r.precision),
        "recall": _estimate(r.recall),
        "f1": _estimate(r.f1),
        "confusion": [list(row) for row in r.confusion],
    }


def _disagreement_out(session_id: int, d: core.Disagreement) -> DisagreementOut:
    a, b = d.pair  # type: ignore[misc]  # a reference pair: two thread ids
    return DisagreementOut.model_validate(
        vars(d)
        | {
            "comparison_id": int(d.comparison),  # type: ignore[call-overload]
            "thread_a_id": a,
            "thread_b_id": b,
            "thread_a_url": f"/threads/{a}",
            "thread_b_url": f"/threads/{b}",
            "pair_url": f"/sessions/{session_id}/review?pair={a}-{b}",
        }
    )


def _human_out(h: people.HumanAgreement) -> HumanAgreementOut:
    return HumanAgreementOut(
        items=h.items,
        annotators=list(h.annotators),
        percent_agreement=_estimate(h.percent_agreement),
        fleiss_kappa=_estimate(h.fleiss_kappa),
        krippendorff_alpha=_estimate(h.krippendorff_alpha),
        pairwise=[
            AnnotatorPairOut.model_validate(
                vars(p) | {"kappa": _estimate(p.kappa), "agreement": _estimate(p.agreement)}
            )
            for p in h.pairwise
        ],
    )


async def labels_of_pairs(db: AsyncSession, pairs: FromClause) -> list[core.ReferenceLabel]:
    """The reference labels of the canonical pairs in ``pairs`` (columns ``a`` < ``b``),
    oldest first: the order majority votes and ties between labels are read in."""
    rows = (
        await db.execute(
            select(
                ReferenceLabel.thread_a_id,
                ReferenceLabel.thread_b_id,
                ReferenceLabel.label,
                ReferenceLabel.source,
                ReferenceLabel.annotator,
            )
            .join(
                pairs,
                and_(
                    pairs.c.a == ReferenceLabel.thread_a_id, pairs.c.b == ReferenceLabel.thread_b_id
                ),
            )
            .order_by(ReferenceLabel.created_at, ReferenceLabel.id)
        )
    ).all()
    return [
        core.ReferenceLabel((a, b), label, source, annotator)  # type: ignore[arg-type]
        for a, b, label, source, annotator in rows
    ]


@dataclass(frozen=True)
class _Loaded:
    judgments: list[core.Judgment]
    stated: list[confidence.ProbabilityJudgment]  # the same, with their confidence
    probable: list[confidence.ProbabilityJudgment]  # the same, with the judge's prob_a
    labels: list[core.ReferenceLabel]
    pillar_of: dict[int, str]  # thread id -> pillar name
    meta_of: dict[int, Any]  # thread id -> value of the chosen metadata key


def _groups(
    pairs: Iterable[tuple[int, int]], value_of: Mapping[int, Any]
) -> dict[Hashable, Hashable]:
    out: dict[Hashable, Hashable] = {}
    for a, b in pairs:
        va, vb = value_of.get(a), value_of.get(b)
        if va is None and vb is None:
            continue  # neither thread has the key: the pair belongs to no group
        out[(a, b)] = core.pair_group(
            "(none)" if va is None else va, "(none)" if vb is None else vb
        )
    return out


def _group_list(
    reports: Mapping[Hashable, core.AgreementReport],
) -> list[GroupAgreementOut]:
    return [
        GroupAgreementOut(group=str(key), **_judge_out(report))
        for key, report in sorted(reports.items(), key=lambda kv: str(kv[0]))
        if report.judgments
    ]


def _compute(
    session_id: int,
    loaded: _Loaded,
    reference: str,
    group_by: str | None,
    completed: int,
    rounds: int,
) -> SessionAgreementOut:
    """The whole report from loaded rows: pure and CPU-bound (bootstrap), run in a thread."""
    references = core.select_references(loaded.labels, reference)
    report = core.agreement_report(loaded.judgments, references, rounds=rounds)
    pairs = list(references)
    group_rounds = min(rounds, GROUP_ROUNDS)
    by_pillar = core.agreement_by_group(
        loaded.judgments, references, _groups(pairs, loaded.pillar_of), rounds=group_rounds
    )
    by_meta = (
        core.agreement_by_group(
            loaded.judgments, references, _groups(pairs, loaded.meta_of), rounds=group_rounds
        )
        if group_by
        else {}
    )
    annotations: dict[Hashable, dict[str, str]] = defaultdict(dict)
    for label in loaded.labels:  # time order: a later label replaces an earlier one
        if label.source == "human":
            annotations[label.pair][label.annotator] = label.label
    human = people.human_agreement(annotations, rounds=rounds)
    shown = report.disagreements[:DISAGREEMENTS_SHOWN]
    return SessionAgreementOut(
        session_id=session_id,
        reference=reference,
        group_by=group_by,
        completed=completed,
        # the comparisons of pairs with no label at all were never loaded
        unlabelled=report.unlabelled + completed - len(loaded.judgments),
        labelled_pairs=report.pairs,
        judge=JudgeAgreementOut(**_judge_out(report)),
        by_pillar_pair=_group_list(by_pillar),
        by_metadata=_group_list(by_meta),
        human=_human_out(human),
        disagreements=[_disagreement_out(session_id, d) for d in shown],
        disagreements_total=len(report.disagreements),
        stated_confidence=StatedConfidenceOut.model_validate(
            confidence.confidence_report(loaded.stated, references, rounds=rounds),
            from_attributes=True,
        ),
        judge_probability=StatedConfidenceOut.model_validate(
            confidence.confidence_report(loaded.probable, references, rounds=rounds),
            from_attributes=True,
        ),
    )


def _check_reference(reference: str) -> None:
    if reference in ("gold", "human", "majority"):
        return
    if reference.startswith("annotator:") and reference.removeprefix("annotator:"):
        return
    raise Invalid(f"reference must be gold, human, majority or annotator:<name>, got {reference!r}")


async def session_agreement(
    *,
    db: AsyncSession,
    session_id: int,
    reference: str = "gold",
    group_by: str | None = None,
    rounds: int = core.DEFAULT_ROUNDS,
) -> SessionAgreementOut:
    """The judge of a session against reference labels, over its completed comparisons."""
    _check_reference(reference)
    if await db.get(JudgeSession, session_id) is None:
        raise NotFound(f"session {session_id} not found")
    judged = (
        Comparison.session_id == session_id,
        Comparison.status == "completed",
        Comparison.winner.is_not(None),
    )
    completed = int(await db.scalar(select(func.count()).where(*judged)) or 0)
    # Only the comparisons of labelled pairs are read: a session of a million comparisons
    # with a few hundred labels reads a few hundred rows, not a million.
    labelled = exists().where(
        ReferenceLabel.thread_a_id == func.least(Comparison.thread_a_id, Comparison.thread_b_id),
        ReferenceLabel.thread_b_id == func.greatest(Comparison.thread_a_id, Comparison.thread_b_id),
    )
    rows = (
        await db.execute(
            select(
                Comparison.id,
                Comparison.thread_a_id,
                Comparison.thread_b_id,
                Comparison.winner,
                Comparison.confidence,
                Comparison.prob_a,
            )
            .where(*judged, labelled)
            .order_by(Comparison.id)
        )
    ).all()
    judgments = [
        # The pair is canonical (lower id first): a comparison that showed the higher id
        # first is the pair swapped.
        core.Judgment((min(a, b), max(a, b)), cid, winner, swapped=a > b)
        for cid, a, b, winner, *_ in rows
    ]
    stated = [
        confidence.ProbabilityJudgment(j.pair, j.winner, stated_c, swapped=j.swapped)
        for j, (*_, stated_c, _) in zip(judgments, rows, strict=True)
    ]
    probable = [
        confidence.ProbabilityJudgment(j.pair, j.winner, None, swapped=j.swapped, prob_a=prob_a)
        for j, (*_, prob_a) in zip(judgments, rows, strict=True)
    ]
    pairs = session_pairs(session_id)
    labels = await labels_of_pairs(db, pairs)
    thread_ids = sorted({t for lab in labels for t in lab.pair})  # type: ignore[attr-defined]
    pillar_of: dict[int, str] = {}
    meta_of: dict[int, Any] = {}
    if thread_ids:
        meta = Thread.meta[group_by].astext if group_by else None
        columns = [Thread.id, Pillar.name] + ([meta] if meta is not None else [])
        thread_rows = await db.execute(
            select(*columns)
            .join(Pillar, Pillar.id == Thread.pillar_id)
            .where(Thread.id == any_(cast(thread_ids, ARRAY(Integer))))
        )
        for row in thread_rows.all():
            pillar_of[row[0]] = row[1]
            if meta is not None and row[2] is not None:
                meta_of[row[0]] = row[2]
    loaded = _Loaded(judgments, stated, probable, labels, pillar_of, meta_of)
    # The bootstrap is CPU work: keep it off the event loop.
    return await asyncio.to_thread(
        _compute, session_id, loaded, reference, group_by, completed, rounds
    )
