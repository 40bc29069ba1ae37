"""The panel report of a panel of graders (a grading session, ``comparison_mode`` single,
judged by a panel): ``GET /api/sessions/{id}/panel`` answers it with ``kind`` ``grades``.

Each member's grade of an item is its vote (``comparison_votes.score``); the panel's grade
is the comparison's (the members' mean or median). The unit is the graded thread: a
member's grade of a thread is the mean of its grades over the thread's repetitions, the
panel's the mean of its grades there. The maths is ``core.agreement.graders``; the
statistics run off the event loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.agreement.graders import (
    MIN_OFFSET_ITEMS,
    PairAgreement,
    alpha_interval_estimate,
    deviating_member,
    grade_offset,
    pair_agreement,
)
from llmjudge.core.analysis.scores import MeanScore, mean_scores
from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.sessions.models import Comparison, ComparisonVote, JudgeSession

__all__ = ["graders_report"]


def _mean(values: np.ndarray) -> dict[str, Any]:
    """Mean of the finite values with its t interval over them (all None when empty)."""
    values = values[~np.isnan(values)]
    if not values.size:
        return {"n": 0, "mean": None, "sd": None, "low": None, "high": None}
    return _mean_out(mean_scores(np.zeros(values.size, dtype=np.int64), values)[0])


def _mean_out(m: MeanScore) -> dict[str, Any]:
    return {"n": m.n, "mean": m.mean, "sd": m.sd, "low": m.low, "high": m.high}


def _agreement(a: PairAgreement) -> dict[str, Any]:
    return {
        "n": a.n,
        "spearman": asdict(a.spearman),
        "pearson": asdict(a.pearson),
        "mean_abs_difference": asdict(a.mean_abs_difference),
        "qwk": asdict(a.qwk),
    }


def _figures(
    grades: np.ndarray,
    panel: np.ndarray,
    labels: list[str],
    scale: tuple[float, float],
    seed: int,
) -> dict[str, Any]:
    """Every statistic of the report from the items x members grades and the panel's."""
    m = grades.shape[1]
    offsets = [grade_offset(grades[:, k], panel) for k in range(m)]
    members = [
        {
            "mean_grade": _mean(grades[:, k]),
            "agreement_with_panel": _agreement(
                pair_agreement(grades[:, k], panel, scale, seed=seed)
            ),
            "offset": None if offsets[k] is None else _mean_out(offsets[k]),  # type: ignore[arg-type]
        }
        for k in range(m)
    ]
    pairs = [
        {
            "first": i,
            "second": j,
            "agreement": _agreement(pair_agreement(grades[:, i], grades[:, j], scale, seed=seed)),
        }
        for i in range(m)
        for j in range(i + 1, m)
    ]
    deviation = deviating_member(offsets, labels)
    return {
        "members": members,
        "pairs": pairs,
        "alpha": asdict(alpha_interval_estimate(grades, seed=seed)),
        "panel_grade": _mean(panel),
        "deviation": {
            "member": deviation.member,
            "label": None if deviation.member is None else labels[deviation.member],
            "offset": None if deviation.offset is None else _mean_out(deviation.offset),
            "statement": deviation.statement,
            "min_items": MIN_OFFSET_ITEMS,
        },
    }


async def graders_report(db: AsyncSession, session: JudgeSession) -> dict[str, Any]:
    """Every figure of a panel of graders' report (``schemas.GradersPanelReportOut``)."""
    panel = session.panel or {}
    members: list[dict[str, Any]] = list(panel.get("members", []))
    m = len(members)
    scale = VerdictFormat.model_validate(session.verdict_format or {"kind": "score"}).score_scale
    comps = (
        await db.execute(
            select(Comparison.id, Comparison.thread_a_id, Comparison.score).where(
                Comparison.session_id == session.id,
                Comparison.status == "completed",
                Comparison.thread_b_id.is_(None),
            )
        )
    ).all()
    threads, item_of = np.unique(
        np.fromiter((c[1] for c in comps), dtype=np.int64, count=len(comps)), return_inverse=True
    )
    t = threads.size
    row_of = {c[0]: int(i) for c, i in zip(comps, item_of, strict=True)}
    graded = np.array([c[2] is not None for c in comps], dtype=bool)
    scores = np.array([c[2] if c[2] is not None else 0.0 for c in comps], dtype=float)
    counts = np.bincount(item_of[graded], minlength=t)
    with np.errstate(invalid="ignore"):
        panel_grade = np.bincount(item_of[graded], weights=scores[graded], minlength=t) / counts
    votes = (
        await db.execute(
            select(
                ComparisonVote.comparison_id,
                ComparisonVote.member,
                ComparisonVote.status,
                ComparisonVote.score,
                ComparisonVote.cost_usd,
                ComparisonVote.latency_s,
            ).where(ComparisonVote.session_id == session.id)
        )
    ).all()
    sums, n_grades = np.zeros((t, m)), np.zeros((t, m), dtype=np.int64)
    missing, cost = np.zeros(m, dtype=np.int64), np.zeros(m)
    latency: list[list[float]] = [[] for _ in range(m)]
    for cid, member, status, score, c, lat in votes:
        i = row_of.get(cid)
        if i is None or not 0 <= member < m:
            continue
        cost[member] += c or 0.0
        if status == "missing":
            missing[member] += 1
        if status == "voted" and score is not None:
            sums[i, member] += score
            n_grades[i, member] += 1
            if lat is not None:
                latency[member].append(lat)
    with np.errstate(invalid="ignore"):
        grades = np.where(n_grades > 0, sums / np.maximum(n_grades, 1), np.nan)
    labels = [x.get("label") or f"member {k + 1}" for k, x in enumerate(members)]
    found = await asyncio.to_thread(_figures, grades, panel_grade, labels, scale, session.id)
    per_member = [
        {
            "index": k,
            "label": labels[k],
            "model_id": x.get("model_id"),
            "items": int((n_grades[:, k] > 0).sum()),
            "grades": int(n_grades[:, k].sum()),
            "missing": int(missing[k]),
            **found["members"][k],
            "cost_usd": float(cost[k]),
            "mean_latency_s": float(np.mean(latency[k])) if latency[k] else None,
        }
        for k, x in enumerate(members)
    ]
    return {
        "kind": "grades",
        "session_id": session.id,
        "rule": panel.get("rule"),
        "scale_min": scale[0],
        "scale_max": scale[1],
        "comparisons": int(graded.sum()),
        "items": int((counts > 0).sum()),
        "members": per_member,
        "pairs": [
            {**p, "first_label": labels[p["first"]], "second_label": labels[p["second"]]}
            for p in found["pairs"]
        ],
        "alpha": found["alpha"],
        "panel": {"mean_grade": found["panel_grade"], "cost_usd": float(cost.sum())},
        "deviation": found["deviation"],
    }
