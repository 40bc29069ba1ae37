"""Single-answer grading results (``GET /api/sessions/{id}/scores``) and the pairwise
outcomes a grading session's other figures read: the grades of its completed items with
their threads' pillars, prompt keys and reference grades, handed to the pure
:mod:`llmjudge.core.analysis.scores` (bootstraps off the event loop)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.analysis.schemas import AnalysisSession
from llmjudge.catalog import Pillar, Thread
from llmjudge.core.analysis.outcomes import OutcomeTable
from llmjudge.core.analysis.scores import (
    MeanScore,
    derived_pairs,
    distribution,
    mean_scores,
    score_agreement,
    thread_means,
)
from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.infra.errors import Conflict
from llmjudge.sessions import Comparison, JudgeSession

__all__ = ["DEFAULT_REFERENCE_KEY", "Grades", "ScoresOut", "derived_outcomes", "scores_report"]

# Thread metadata holding a reference grade (e.g. a human's) on the session's scale.
DEFAULT_REFERENCE_KEY = "reference_score"


@dataclass(frozen=True)
class Grades:
    """One row per completed grade (a thread graded r times has r rows)."""

    thread: np.ndarray
    pillar: np.ndarray
    prompt_key: list[str | None]
    score: np.ndarray
    criteria: list[dict[str, float] | None]
    titles: dict[int, str]
    meta: dict[int, dict[str, Any]]


async def load_grades(db: AsyncSession, session_id: int) -> Grades:
    rows = (
        await db.execute(
            select(
                Comparison.thread_a_id,
                Comparison.pillar_a_id,
                Thread.prompt_key,
                Comparison.score,
                Comparison.scores_a,
                Thread.title,
                Thread.meta,
            )
            .outerjoin(Thread, Thread.id == Comparison.thread_a_id)
            .where(
                Comparison.session_id == session_id,
                Comparison.status == "completed",
                Comparison.score.is_not(None),
                Comparison.thread_b_id.is_(None),
            )
            .order_by(Comparison.id)
        )
    ).all()
    return Grades(
        thread=np.array([r[0] for r in rows], dtype=np.int64),
        pillar=np.array([r[1] for r in rows], dtype=np.int64),
        prompt_key=[r[2] for r in rows],
        score=np.array([r[3] for r in rows], dtype=float),
        criteria=[r[4] for r in rows],
        titles={r[0]: r[5] or f"thread {r[0]}" for r in rows},
        meta={r[0]: r[6] or {} for r in rows},
    )


def derived_outcomes(grades: Grades) -> tuple[OutcomeTable, dict[int, int]]:
    """The pairwise outcomes the grades imply (``scores.derived_pairs``) as the table the
    leaderboards read, and thread -> pillar of every graded thread."""
    pairs = derived_pairs(grades.thread, grades.pillar, grades.prompt_key, grades.score)
    table = OutcomeTable.from_columns(
        comparison_id=np.arange(len(pairs), dtype=np.int64),
        thread_a=pairs.thread_a,
        thread_b=pairs.thread_b,
        score_a=pairs.score_a,
    )
    return table, dict(zip(grades.thread.tolist(), grades.pillar.tolist(), strict=False))


class MeanScoreOut(BaseModel):
    n: int = Field(description="units averaged (threads for a pillar, grades for a thread)")
    mean: float
    sd: float | None
    low: float | None = Field(description="95 % t interval; null below 2 units")
    high: float | None


class PillarScoreOut(MeanScoreOut):
    pillar_id: int
    pillar_name: str
    grades: int = Field(description="grades behind the threads' means (repetitions count)")
    criteria: dict[str, float] = Field(description="mean per criterion (likert formats)")


class ThreadScoreOut(MeanScoreOut):
    thread_id: int
    title: str
    pillar_id: int
    pillar_name: str
    prompt_key: str | None


class ScoreBinOut(BaseModel):
    low: float
    high: float
    counts: dict[int, int] = Field(description="grades per pillar id in this bin")


class Interval(BaseModel):
    low: float
    high: float


class ScoreAgreementOut(BaseModel):
    reference_key: str = Field(description="the thread metadata holding reference grades")
    n: int = Field(description="graded threads with a reference grade")
    spearman: float | None
    pearson: float | None
    mae: float | None = Field(description="mean absolute error, in scale points")
    qwk: float | None = Field(description="quadratic-weighted kappa on whole scale points")
    intervals: dict[str, Interval | None] = Field(description="95 % bootstrap over threads")


class ScoresOut(BaseModel):
    session_id: int
    kind: str = Field(description="the score format: score or likert")
    weighted: bool = Field(
        description="true: every grade is probability-weighted (G-Eval): the mean of the "
        "scale's values under the judge's token probabilities where it wrote the grade, so "
        "not a whole number; the grade as written stays in each answer's raw_response"
    )
    scale_min: float
    scale_max: float
    grades: int = Field(description="completed grades")
    failed: int = Field(description="items that failed (no grade on the scale)")
    pillars: list[PillarScoreOut] = Field(description="best mean first")
    threads: list[ThreadScoreOut] = Field(description="best mean first")
    distribution: list[ScoreBinOut]
    agreement: ScoreAgreementOut | None = Field(
        description="against reference grades in thread metadata; null when none has one"
    )
    derived_pairs: int = Field(
        description="pairwise outcomes derived from the grades (same prompt key, different "
        "pillars: the higher grade wins, equal ties) that the leaderboards read"
    )
    unkeyed_threads: int = Field(description="graded threads without a prompt key: in no pair")


def _mean_out(m: MeanScore) -> dict[str, Any]:
    return {"n": m.n, "mean": m.mean, "sd": m.sd, "low": m.low, "high": m.high}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _report(
    grades: Grades,
    names: dict[int, str],
    fmt: VerdictFormat,
    reference_key: str,
    seed: int,
) -> dict[str, Any]:
    ids, means = thread_means(grades.thread, grades.score)
    pillar_of = dict(zip(grades.thread.tolist(), grades.pillar.tolist(), strict=False))
    key_of = dict(zip(grades.thread.tolist(), grades.prompt_key, strict=False))
    threads = [
        ThreadScoreOut(
            **_mean_out(m),
            thread_id=m.key,
            title=grades.titles.get(m.key, ""),
            pillar_id=pillar_of[m.key],
            pillar_name=names.get(pillar_of[m.key], f"pillar {pillar_of[m.key]}"),
            prompt_key=key_of[m.key],
        )
        for m in mean_scores(grades.thread, grades.score)
    ]
    per_pillar = np.array([pillar_of[t] for t in ids.tolist()], dtype=np.int64)
    counts = dict(
        zip(*(c.tolist() for c in np.unique(grades.pillar, return_counts=True)), strict=True)
    )
    criteria: dict[int, dict[str, list[float]]] = {}
    for p, crit in zip(grades.pillar.tolist(), grades.criteria, strict=True):
        for name, value in (crit or {}).items():
            criteria.setdefault(p, {}).setdefault(name, []).append(float(value))
    pillars = [
        PillarScoreOut(
            **_mean_out(m),
            pillar_id=m.key,
            pillar_name=names.get(m.key, f"pillar {m.key}"),
            grades=counts.get(m.key, 0),
            criteria={k: float(np.mean(v)) for k, v in criteria.get(m.key, {}).items()},
        )
        for m in mean_scores(per_pillar, means)
    ]
    scale = fmt.score_scale
    judged, reference = [], []
    for t, mean in zip(ids.tolist(), means.tolist(), strict=True):
        ref = _number(grades.meta.get(t, {}).get(reference_key))
        if ref is not None:
            judged.append(mean)
            reference.append(ref)
    agreement = None
    if judged:
        found = score_agreement(judged, reference, scale, seed=seed)
        agreement = ScoreAgreementOut(
            reference_key=reference_key,
            n=found.n,
            spearman=found.spearman,
            pearson=found.pearson,
            mae=found.mae,
            qwk=found.qwk,
            intervals={
                k: None if v is None else Interval(low=v[0], high=v[1])
                for k, v in found.intervals.items()
            },
        )
    pairs = derived_pairs(grades.thread, grades.pillar, grades.prompt_key, grades.score)
    return {
        "kind": fmt.kind,
        "weighted": fmt.weighted,
        "scale_min": scale[0],
        "scale_max": scale[1],
        "grades": int(grades.score.size),
        "pillars": sorted(pillars, key=lambda p: (-p.mean, p.pillar_name)),
        "threads": sorted(threads, key=lambda t: (-t.mean, t.thread_id)),
        "distribution": [
            ScoreBinOut(low=b.low, high=b.high, counts=b.counts)
            for b in distribution(grades.pillar, grades.score, scale)
        ],
        "agreement": agreement,
        "derived_pairs": len(pairs),
        "unkeyed_threads": pairs.unkeyed,
    }


async def scores_report(
    *, db: AsyncSession, session: AnalysisSession, reference_key: str = DEFAULT_REFERENCE_KEY
) -> ScoresOut:
    if session.comparison_mode != "single":
        raise Conflict(
            f"session {session.id} compares pairs ({session.comparison_mode}): it has no "
            "grades; single-answer grading is comparison_mode single"
        )
    row = await db.get(JudgeSession, session.id)
    assert row is not None  # the session was just read
    fmt = VerdictFormat.model_validate(row.verdict_format or {"kind": "score"})
    grades = await load_grades(db, session.id)
    names = dict((await db.execute(select(Pillar.id, Pillar.name))).all())
    await db.close()  # the statistics need no connection
    found = await asyncio.to_thread(_report, grades, names, fmt, reference_key, session.id)
    return ScoresOut(session_id=session.id, failed=session.failed, **found)
