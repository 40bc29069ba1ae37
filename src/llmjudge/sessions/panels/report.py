"""Judge panels in the sessions domain: reading a panel's votes and its reference labels,
and the panel report (``GET /api/sessions/{id}/panel``; a panel of graders': ``graders``). The maths is ``core.judging.panel_report`` (and ``panels`` for the cascade).

Verdicts are compared in each comparison's own order (the order the judge saw); a
reference label, stored for the canonical pair (lower thread id first), is flipped to match.
Position consistency maps swapped comparisons back to their pair's order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
from sqlalchemy import ARRAY, Integer, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.agreement.judges import Estimate, select_references, wilson
from llmjudge.core.judging.panel_report import codes as label_codes
from llmjudge.core.judging.panel_report import (
    kappa_matrix,
    n_eff,
    panel_vs_member,
    position_consistency,
)
from llmjudge.core.judging.panels import calibrate_cascade, calibrated_weights
from llmjudge.infra.errors import Invalid, NotFound
from llmjudge.references import labels_of_pairs
from llmjudge.sessions.models import Comparison, ComparisonVote, JudgeSession
from llmjudge.sessions.panels.graders import graders_report

__all__ = ["canonical_references", "learn_weights", "panel_report", "reference_codes"]

_FLIP_CODE = np.array([1, 0, 2])  # A <-> B, TIE stays (class codes 0, 1, 2)
N_EFF_EXPLAINED = (
    "Members whose errors are correlated add less than one vote each: n_eff = m / (1 + (m-1)"
    " * mean error correlation), m for independent errors, 1 when all err together."
)


async def canonical_references(
    db: AsyncSession, pairs: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], str]:
    """One reference label per canonical pair (lo, hi): gold labels where any exist for the
    pairs, else the human majority (``analysis.agreement.select_references``)."""
    wanted = sorted({(min(a, b), max(a, b)) for a, b in pairs})
    if not wanted:
        return {}
    keys = select(
        func.unnest(cast([p[0] for p in wanted], ARRAY(Integer))).label("a"),
        func.unnest(cast([p[1] for p in wanted], ARRAY(Integer))).label("b"),
    ).subquery()
    labels = await labels_of_pairs(db, keys)
    if any(x.source == "gold" for x in labels):
        return select_references(labels, "gold")  # type: ignore[return-value]
    return select_references(labels, "majority")  # type: ignore[return-value]


def reference_codes(
    pairs: Sequence[tuple[int, int]], refs: dict[tuple[int, int], str]
) -> np.ndarray:
    """Class code of each comparison's reference in its own order (-1: none)."""
    out = np.full(len(pairs), -1, dtype=np.int64)
    index = {"A": 0, "B": 1, "TIE": 2}
    for i, (a, b) in enumerate(pairs):
        label = refs.get((min(a, b), max(a, b)))
        if label is not None:
            code = index[label]
            out[i] = code if a < b else _FLIP_CODE[code]
    return out


def _estimate(e: Estimate) -> dict[str, Any]:
    return asdict(e)


def _accuracy(winners: np.ndarray, ref: np.ndarray) -> Estimate:
    ok = (winners >= 0) & (ref >= 0)
    return wilson(int((winners[ok] == ref[ok]).sum()), int(ok.sum()))


def _agreement(a: np.ndarray, b: np.ndarray) -> Estimate:
    ok = (a >= 0) & (b >= 0)
    return wilson(int((a[ok] == b[ok]).sum()), int(ok.sum()))


def _pair_order(winners: np.ndarray, is_swap: np.ndarray) -> np.ndarray:
    out = winners.copy()
    flip = is_swap & (winners >= 0)
    out[flip] = _FLIP_CODE[winners[flip]]
    return out


async def panel_report(
    db: AsyncSession, session_id: int, *, target: float | None = None
) -> dict[str, Any]:
    """Every figure of the panel report; see ``core.judging.panel_report`` for each definition.
    ``target``: the agreement with the reference a cascade of these members should reach;
    its confidence threshold is calibrated on the labelled comparisons every member voted
    on (unset: the best member's accuracy)."""
    session = await db.get(JudgeSession, session_id)
    if session is None:
        raise NotFound(f"no session with id {session_id}")
    panel = session.panel
    if not panel:
        raise Invalid("this session has one judge, not a panel")
    if session.comparison_mode == "single":  # its members' votes are grades, not A/B
        return await graders_report(db, session)
    members: list[dict[str, Any]] = list(panel.get("members", []))
    m = len(members)
    comps = (
        await db.execute(
            select(
                Comparison.id,
                Comparison.thread_a_id,
                Comparison.thread_b_id,
                Comparison.swap_group,
                Comparison.is_swap,
                Comparison.winner,
                Comparison.status,
                Comparison.votes_asked,
                Comparison.cost_usd,
            )
            .where(Comparison.session_id == session_id, Comparison.status == "completed")
            .order_by(Comparison.queue_position)
        )
    ).all()
    n = len(comps)
    row_of = {c[0]: i for i, c in enumerate(comps)}
    votes = np.full((n, m), -1, dtype=np.int64)
    cost = np.zeros((n, m))
    latency = np.full((n, m), np.nan)
    answered = np.zeros((n, m), dtype=bool)
    calls = np.zeros(m, dtype=np.int64)
    missing = np.zeros(m, dtype=np.int64)
    vote_rows = await db.execute(
        select(
            ComparisonVote.comparison_id,
            ComparisonVote.member,
            ComparisonVote.status,
            ComparisonVote.winner,
            ComparisonVote.cost_usd,
            ComparisonVote.latency_s,
            ComparisonVote.confidence,
        ).where(ComparisonVote.session_id == session_id)
    )
    index = {"A": 0, "B": 1, "TIE": 2}
    confidence = np.full((n, m), np.nan)
    for cid, member, status, winner, c, lat, conf in vote_rows.all():
        i = row_of.get(cid)
        if i is None or member >= m:
            continue
        if status != "skipped":
            calls[member] += 1
        if status == "missing":
            missing[member] += 1
        if status == "voted" and winner is not None:
            votes[i, member] = index[winner]
            answered[i, member] = True
        cost[i, member] = c or 0.0
        if conf is not None:
            confidence[i, member] = conf
        latency[i, member] = np.nan if lat is None else lat
    pairs = [(c[1], c[2]) for c in comps]
    ref = reference_codes(pairs, await canonical_references(db, pairs))
    agg = label_codes([c[5] for c in comps])
    is_swap = np.fromiter((bool(c[4]) for c in comps), dtype=bool, count=n)
    swap_group = np.fromiter((c[3] for c in comps), dtype=np.int64, count=n)

    per_member = []
    for k, member in enumerate(members):
        lat = latency[answered[:, k], k]
        per_member.append(
            {
                "index": k,
                "label": member.get("label") or f"member {k + 1}",
                "model_id": member.get("model_id"),
                "weight": member.get("weight"),
                "voted": int(answered[:, k].sum()),
                "missing": int(missing[k]),
                "agreement_with_panel": _estimate(_agreement(votes[:, k], agg)),
                "accuracy": _estimate(_accuracy(votes[:, k], ref)),
                "consistency": _estimate(
                    position_consistency(_pair_order(votes[:, k], is_swap), swap_group, is_swap)
                ),
                "cost_usd": float(cost[:, k].sum()),
                "mean_latency_s": float(lat.mean()) if lat.size else None,
            }
        )
    panel_accuracy = _accuracy(agg, ref)
    labelled = [p for p in per_member if p["accuracy"]["n"] > 0]
    best = max(labelled, key=lambda p: (p["accuracy"]["value"], -p["index"]), default=None)
    cheapest = min(per_member, key=lambda p: (p["cost_usd"], p["index"]), default=None)

    def versus(p: dict[str, Any] | None) -> dict[str, Any] | None:
        if p is None:
            return None
        out = panel_vs_member(agg, votes[:, p["index"]], ref, p["index"])
        return {
            "member": p["index"],
            "label": p["label"],
            "n": out.n,
            "panel_accuracy": _estimate(out.panel_accuracy),
            "member_accuracy": _estimate(out.member_accuracy),
            "difference": _estimate(out.difference),
            "beats": out.beats,
            "member_cost_usd": p["cost_usd"],
            "member_consistency": p["consistency"],
        }

    vs_best, vs_cheapest = versus(best), versus(cheapest)
    if vs_best is None:
        verdict = "No reference labels for these comparisons: the panel cannot be scored."
    elif vs_best["beats"]:
        verdict = f"The panel beats its best member ({vs_best['label']}) on these labels."
    else:
        verdict = (
            f"The panel does not beat its best member ({vs_best['label']}): on "
            f"{vs_best['n']} labelled comparisons the difference in accuracy is not above 0 "
            "with 95 % confidence."
        )
    full = answered.all(axis=1) & (ref >= 0)
    errors = votes[full] != ref[full, None]
    neff = n_eff(errors)
    report: dict[str, Any] = {
        "kind": "pairs",
        "session_id": session_id,
        "rule": panel.get("rule"),
        "members": per_member,
        "comparisons": n,
        "labelled": int((ref >= 0).sum()),
        "kappa": kappa_matrix(votes) if m else [],
        "panel": {
            "accuracy": _estimate(panel_accuracy),
            "consistency": _estimate(
                position_consistency(_pair_order(agg, is_swap), swap_group, is_swap)
            ),
            "cost_usd": float(cost.sum()),
            "voted": {
                str(k): int(v)
                for k, v in zip(*np.unique(answered.sum(axis=1), return_counts=True), strict=True)
            },
        },
        "vs_best": vs_best,
        "vs_cheapest": vs_cheapest,
        "verdict": verdict,
        "n_eff": {**asdict(neff), "explanation": N_EFF_EXPLAINED},
        "cascade": None,
    }
    report["cascade_calibration"] = _calibration(
        votes, confidence, ref, answered, cost, calls, target, best
    )
    if panel.get("rule") == "cascade" and n:
        asked = np.fromiter((c[7] or m for c in comps), dtype=np.int64, count=n)
        share = np.bincount(np.clip(asked - 1, 0, max(m - 1, 0)), minlength=m) / n
        # Asking everyone would have cost each member its mean cost per answered call.
        per_call = np.where(calls > 0, cost.sum(axis=0) / np.maximum(calls, 1), 0.0)
        everyone = float(per_call.sum() * n)
        spent = float(cost.sum())
        report["cascade"] = {
            "stop_share": [float(x) for x in share],
            "escalated": _estimate(wilson(int((asked > 1).sum()), n)),
            "agreement": _estimate(panel_accuracy),
            "spent_usd": spent,
            "everyone_usd": everyone,
            "saving_usd": everyone - spent,
            "policy": panel.get("cascade"),
        }
    return report


MIN_CALIBRATION = 30  # labelled comparisons every member voted on, to calibrate a cascade


def _calibration(
    votes: np.ndarray,
    confidence: np.ndarray,
    ref: np.ndarray,
    answered: np.ndarray,
    cost: np.ndarray,
    calls: np.ndarray,
    target: float | None,
    best: dict[str, Any] | None,
) -> dict[str, Any]:
    """The cascade these members would make (in their order), its confidence threshold
    calibrated to reach ``target`` on the labelled comparisons where everyone voted with a
    confidence; refused below ``MIN_CALIBRATION`` of them."""
    use = answered.all(axis=1) & (ref >= 0) & np.isfinite(confidence).all(axis=1)
    n = int(use.sum())
    if target is None:
        target = best["accuracy"]["value"] if best is not None else None
    if n < MIN_CALIBRATION or target is None or votes.shape[1] < 2:
        return {
            "n": n,
            "target": target,
            "available": False,
            "reason": f"needs {MIN_CALIBRATION} labelled comparisons answered by every member "
            f"with a confidence ({n} here)",
        }
    per_call = np.where(calls > 0, cost.sum(axis=0) / np.maximum(calls, 1), 0.0)
    cal = calibrate_cascade(
        votes[use], confidence[use], ref[use], target=float(target), member_cost=per_call
    )
    return {
        "available": True,
        "n": cal.n,
        "target": cal.target,
        "target_met": cal.target_met,
        "threshold": cal.threshold if math.isfinite(cal.threshold) else None,
        "agreement": _estimate(cal.agreement),
        "escalated": _estimate(cal.escalated),
        "stop_share": list(cal.stop_share),
        "expected_cost_usd": cal.expected_cost,
        "everyone_cost_usd": cal.all_cost,
    }


async def learn_weights(
    db: AsyncSession, session_id: int, model_ids: Sequence[int]
) -> tuple[list[float], int]:
    """Calibrated weights (``judging.panels.calibrated_weights``) from a finished panel
    session of the same members in the same order, against the reference labels of its
    pairs; and the labelled comparisons they rest on."""
    source = await db.get(JudgeSession, session_id)
    if source is None or not source.panel:
        raise Invalid(f"calibration_session_id {session_id} is not a panel session")
    theirs = [m.get("model_id") for m in source.panel.get("members", [])]
    if theirs != list(model_ids):
        raise Invalid(
            f"session {session_id} had members {theirs}, not {list(model_ids)}: calibrate on "
            "a run of the same panel"
        )
    comps = (
        await db.execute(
            select(Comparison.id, Comparison.thread_a_id, Comparison.thread_b_id)
            .where(Comparison.session_id == session_id, Comparison.status == "completed")
            .order_by(Comparison.queue_position)
        )
    ).all()
    row_of = {c[0]: i for i, c in enumerate(comps)}
    votes = np.full((len(comps), len(model_ids)), -1, dtype=np.int64)
    index = {"A": 0, "B": 1, "TIE": 2}
    rows = await db.execute(
        select(ComparisonVote.comparison_id, ComparisonVote.member, ComparisonVote.winner).where(
            ComparisonVote.session_id == session_id, ComparisonVote.status == "voted"
        )
    )
    for cid, member, winner in rows.all():
        i = row_of.get(cid)
        if i is not None and winner is not None and member < len(model_ids):
            votes[i, member] = index[winner]
    pairs = [(c[1], c[2]) for c in comps]
    ref = reference_codes(pairs, await canonical_references(db, pairs))
    labelled = (votes >= 0) & (ref[:, None] >= 0)
    weights = calibrated_weights(votes == ref[:, None], labelled)
    return [float(w) for w in weights], int((ref >= 0).sum())
