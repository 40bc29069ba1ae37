"""Judge panels: several judges per comparison, their aggregate, cascades, and the report.

Pure functions over plain values; no I/O. A **vote** is one member's verdict on one
comparison (``None`` winner: the member is missing, e.g. it failed after its retries). A
**panel** asks every member (``majority``, ``mean``, ``weighted``, ``calibrated``) or asks
them in order, cheapest first, until one is confident enough (a **cascade**).

Verdicts are coded A = +1, B = -1, TIE = 0 where a signed value is needed, and 0, 1, 2
(A, B, TIE) as class codes; missing is -1.
The report's comparisons of members and panel are ``panel_report``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from llmjudge.core.agreement.judges import Estimate, wilson

__all__ = [
    "AGGREGATIONS",
    "CASCADE_RULES",
    "MIN_CALIBRATION_LABELS",
    "SCORE_AGGREGATIONS",
    "Aggregate",
    "CascadeCalibration",
    "CascadePolicy",
    "Vote",
    "ScoreAggregate",
    "aggregate",
    "aggregate_scores",
    "calibrate_cascade",
    "calibrated_weights",
    "cascade",
    "cascade_stops",
    "expected_cascade_cost",
    "majority",
    "mean",
    "panel_probability",
    "panel_strength",
    "should_stop",
    "weighted",
]

Label = Literal["A", "B", "TIE"]
AGGREGATIONS = ("majority", "mean", "weighted", "calibrated", "cascade")
CASCADE_RULES = ("confidence", "agreement", "swap")
CLASSES: tuple[Label, ...] = ("A", "B", "TIE")
_CODE = {"A": 0, "B": 1, "TIE": 2}
_SIGN = {"A": 1.0, "B": -1.0, "TIE": 0.0}
# Below this many reference labels per member, calibrated weights are equal weights: a
# handful of labels cannot tell members apart (fail closed to the plain vote).
MIN_CALIBRATION_LABELS = 20
# Pseudo-labels at the panel's pooled accuracy added to each member's record (shrinkage).
SHRINK_LABELS = 20.0
_EPS = 1e-9


@dataclass(frozen=True)
class Vote:
    """One member's answer to one comparison, in the comparison's order."""

    winner: Label | None  # None: missing (the member failed)
    confidence: float | None = None
    scores_a: Mapping[str, float] | None = None
    scores_b: Mapping[str, float] | None = None
    # For the swap rule: the member's verdict on the swapped order, mapped back.
    swapped_winner: Label | None = None


@dataclass(frozen=True)
class Aggregate:
    """The panel's verdict; ``voted`` of ``members`` answered (``asked`` for a cascade)."""

    winner: Label | None  # None: nobody voted
    voted: int
    members: int
    confidence: float | None = None
    scores_a: dict[str, float] = field(default_factory=dict)
    scores_b: dict[str, float] = field(default_factory=dict)
    asked: int = 0  # members asked (a cascade stops early); = members otherwise
    stopped_at: int | None = None  # cascade: index of the member that settled it


def _present(votes: Sequence[Vote]) -> list[tuple[int, Vote]]:
    return [(i, v) for i, v in enumerate(votes) if v.winner is not None]


def _mean_scores(votes: Sequence[Vote], side: str) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for v in votes:
        for k, x in (getattr(v, side) or {}).items():
            sums.setdefault(k, []).append(float(x))
    return {k: sum(xs) / len(xs) for k, xs in sums.items()}


def _pooled(
    votes: Sequence[Vote], ok: Sequence[Vote], winner: Label | None, confidence: float | None
) -> Aggregate:
    """A verdict of the whole panel (every member asked): `ok`, the members that answered,
    give their mean scores."""
    return Aggregate(
        winner=winner,
        voted=len(ok),
        members=len(votes),
        confidence=confidence,
        scores_a=_mean_scores(ok, "scores_a"),
        scores_b=_mean_scores(ok, "scores_b"),
        asked=len(votes),
    )


def _plurality(votes: Sequence[Vote], weights: Sequence[float]) -> Aggregate:
    """Weighted plurality over A, B, TIE; a tie between the top labels is TIE."""
    present = _present(votes)
    tally = dict.fromkeys(CLASSES, 0.0)
    for i, v in present:
        tally[v.winner] += float(weights[i])  # type: ignore[index]
    total = sum(tally.values())
    winner: Label | None = None
    confidence = None
    if present:
        top = max(tally.values())
        leaders = [c for c in CLASSES if abs(tally[c] - top) <= _EPS * max(1.0, total)]
        winner = leaders[0] if len(leaders) == 1 else "TIE"
        confidence = tally[winner] / total if total > _EPS else None
    ok = [v for _, v in present]
    return _pooled(votes, ok, winner, confidence)


def majority(votes: Sequence[Vote]) -> Aggregate:
    """The label most present members gave; a tie between labels (1 A, 1 B) is TIE."""
    return _plurality(votes, [1.0] * len(votes))


def weighted(votes: Sequence[Vote], weights: Sequence[float]) -> Aggregate:
    """Weighted plurality: each present member adds its weight to its label; the heaviest
    label wins, a tie between the heaviest is TIE. Missing members' weights drop out."""
    if len(weights) != len(votes):
        raise ValueError(f"{len(votes)} votes but {len(weights)} weights")
    if any(w < 0 or not math.isfinite(w) for w in weights):
        raise ValueError("weights must be finite and >= 0")
    return _plurality(votes, weights)


def mean(votes: Sequence[Vote], tie_band: float = 1 / 3) -> Aggregate:
    """Mean of the signed verdicts (A +1, B -1, TIE 0) of present members, and the mean of
    each criterion's scores. |mean| <= ``tie_band`` is TIE (one A among three TIEs is a
    TIE); otherwise its sign. The confidence is |mean|."""
    present = _present(votes)
    ok = [v for _, v in present]
    winner: Label | None = None
    confidence = None
    if ok:
        s = sum(_SIGN[v.winner] for v in ok) / len(ok)  # type: ignore[index]
        winner = "TIE" if abs(s) <= tie_band + _EPS else ("A" if s > 0 else "B")
        confidence = abs(s)
    return _pooled(votes, ok, winner, confidence)


def calibrated_weights(
    correct: np.ndarray,
    labelled: np.ndarray,
    *,
    min_labels: int = MIN_CALIBRATION_LABELS,
    shrink: float = SHRINK_LABELS,
) -> np.ndarray:
    """Per-member weights learned from reference labels: the log-odds of each member's
    accuracy, log(p / (1 - p)).

    Why log-odds: for members that err independently, the weighted vote with these weights
    is the most likely verdict given the votes (the Nitzan-Paroush rule); a small logistic
    model would need many more labels than a panel usually has. ``p`` is shrunk toward the
    panel's pooled accuracy by ``shrink`` pseudo-labels, so with few labels the weights are
    nearly equal; with fewer than ``min_labels`` labels for any member, they are equal. A
    member no better than chance gets weight 0 (it adds no evidence); if none is better
    than chance, weights are equal.

    ``correct``, ``labelled``: (comparisons, members) booleans; ``correct`` counts only
    where ``labelled`` (the member voted and the reference exists).
    """
    correct = np.asarray(correct, dtype=bool)
    labelled = np.asarray(labelled, dtype=bool)
    if correct.shape != labelled.shape or correct.ndim != 2:
        raise ValueError("correct and labelled must be (comparisons, members) of one shape")
    m = correct.shape[1]
    n = labelled.sum(axis=0).astype(float)
    if m == 0:
        return np.zeros(0)
    if n.min() < min_labels:
        return np.ones(m)
    c = (correct & labelled).sum(axis=0).astype(float)
    pooled = c.sum() / n.sum()
    p = (c + shrink * pooled) / (n + shrink)
    p = np.clip(p, 1e-3, 1 - 1e-3)
    w = np.maximum(np.log(p / (1 - p)), 0.0)
    if w.sum() <= _EPS:
        return np.ones(m)
    return w


# --------------------------------------------------------------------------- cascades


@dataclass(frozen=True)
class CascadePolicy:
    """When a cascade stops: ``confidence`` (the member's own confidence >= threshold),
    ``agreement`` (the latest two members agree: the first two, else on), or ``swap`` (the
    member's two orders agree)."""

    rule: Literal["confidence", "agreement", "swap"] = "confidence"
    threshold: float = 0.8


def should_stop(asked: Sequence[Vote], policy: CascadePolicy) -> bool:
    """Whether the cascade may stop after the members asked so far."""
    present = [v for v in asked if v.winner is not None]
    if not present or asked[-1].winner is None:
        return False
    last = asked[-1]
    if policy.rule == "confidence":
        return last.confidence is not None and last.confidence >= policy.threshold
    if policy.rule == "agreement":
        return len(present) >= 2 and present[-1].winner == present[-2].winner
    if policy.rule == "swap":
        return last.swapped_winner is not None and last.swapped_winner == last.winner
    raise ValueError(f"unknown cascade rule {policy.rule!r}")


def cascade(votes: Sequence[Vote], policy: CascadePolicy) -> Aggregate:
    """Replay a cascade on every member's answer: ask in order, stop at the first member
    where ``should_stop``. The verdict is the stopping member's; when nobody stops, the last
    present member's (the last asked is the strongest judge)."""
    for k in range(1, len(votes) + 1):
        if should_stop(votes[:k], policy):
            return _said_by(votes, votes[k - 1], asked=k, stopped_at=k - 1)
    present = _present(votes)
    if not present:
        return Aggregate(None, 0, len(votes), asked=len(votes))
    return _said_by(votes, present[-1][1], asked=len(votes), stopped_at=None)


def _said_by(
    votes: Sequence[Vote], member: Vote, *, asked: int, stopped_at: int | None
) -> Aggregate:
    """A cascade's verdict: `member`'s own, after the first `asked` members were asked."""
    return Aggregate(
        winner=member.winner,
        voted=len(_present(votes[:asked])),
        members=len(votes),
        confidence=member.confidence,
        scores_a=dict(member.scores_a or {}),
        scores_b=dict(member.scores_b or {}),
        asked=asked,
        stopped_at=stopped_at,
    )


def aggregate(
    rule: str,
    votes: Sequence[Vote],
    *,
    weights: Sequence[float] | None = None,
    policy: CascadePolicy | None = None,
) -> Aggregate:
    """Dispatch on the session's aggregation rule."""
    if rule == "majority":
        return majority(votes)
    if rule == "mean":
        return mean(votes)
    if rule in ("weighted", "calibrated"):
        return weighted(votes, weights if weights is not None else [1.0] * len(votes))
    if rule == "cascade":
        return cascade(votes, policy or CascadePolicy())
    raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {rule!r}")


def panel_strength(
    winner: str | None, votes: Sequence[tuple[str | None, int | None] | None]
) -> int | None:
    """The panel verdict's strength from its members' (winner, strength): 2 ("much
    better") when most of the members who voted for the winner and gave a strength said 2,
    else 1; None for a tie, no verdict, or when none of them gave a strength."""
    if winner is None or winner == "TIE":
        return None
    given = [v[1] for v in votes if v is not None and v[0] == winner and v[1] is not None]
    if not given:
        return None
    return 2 if 2 * sum(s == 2 for s in given) > len(given) else 1


def panel_probability(voted: Sequence[float | None]) -> float | None:
    """A panel's P(A is better) from the probabilities of the members that voted: their
    mean when every one of them gave one (a mean over some would pass for the panel's);
    None otherwise, or when nobody voted."""
    if not voted or any(p is None for p in voted):
        return None
    return sum(p for p in voted if p is not None) / len(voted)


def cascade_stops(confidence: np.ndarray, threshold: float) -> np.ndarray:
    """Member index at which a ``confidence`` cascade stops, per comparison (vectorised);
    the last member when none reaches ``threshold``. ``confidence``: (comparisons,
    members), NaN where missing."""
    conf = np.nan_to_num(np.asarray(confidence, dtype=float), nan=-np.inf)
    hit = conf >= threshold
    hit[:, -1] = True  # the last member always settles it
    return hit.argmax(axis=1)


def expected_cascade_cost(member_cost: Sequence[float], stop_share: Sequence[float]) -> float:
    """Expected spend per comparison: member k is paid when the cascade reaches it, with
    probability 1 - (share stopped before k)."""
    cost = np.asarray(member_cost, dtype=float)
    share = np.asarray(stop_share, dtype=float)
    if cost.shape != share.shape:
        raise ValueError("one stop share per member")
    reach = 1.0 - np.concatenate([[0.0], np.cumsum(share)[:-1]])
    return float((np.clip(reach, 0.0, 1.0) * cost).sum())


@dataclass(frozen=True)
class CascadeCalibration:
    threshold: float
    agreement: Estimate  # with the reference, at this threshold
    escalated: Estimate  # share of comparisons that asked beyond the first member
    stop_share: tuple[float, ...]  # share settled at each member
    expected_cost: float  # per comparison
    all_cost: float  # asking everyone
    target: float
    target_met: bool
    n: int


def calibrate_cascade(
    winners: np.ndarray,
    confidence: np.ndarray,
    reference: np.ndarray,
    *,
    target: float,
    member_cost: Sequence[float] | None = None,
) -> CascadeCalibration:
    """The lowest confidence threshold whose cascade agrees with the reference at least
    ``target`` (the cheapest that reaches it), from every member's answers on labelled
    comparisons. When no threshold reaches the target, the most accurate one (ties: the
    cheaper), with ``target_met`` False.

    ``winners``: (n, members) class codes (0 A, 1 B, 2 TIE); ``confidence`` same shape
    (NaN: none); ``reference``: (n,) class codes.
    """
    winners = np.asarray(winners, dtype=np.int64)
    confidence = np.asarray(confidence, dtype=float)
    reference = np.asarray(reference, dtype=np.int64)
    n, m = winners.shape
    costs = np.ones(m) if member_cost is None else np.asarray(member_cost, dtype=float)
    if n == 0 or m == 0:
        raise ValueError("calibration needs labelled comparisons and members")
    finite = confidence[np.isfinite(confidence)]
    candidates = np.unique(np.concatenate([finite, [np.inf]]))
    rows = np.arange(n)
    best: tuple[float, float, float] | None = None  # (-agree, cost, threshold) to minimise
    chosen = None
    for t in candidates:  # ascending: the first to reach the target is the cheapest
        stops = cascade_stops(confidence, t)
        agree = float((winners[rows, stops] == reference).mean())
        share = np.bincount(stops, minlength=m) / n
        cost = expected_cascade_cost(costs, share)
        if agree >= target - _EPS:
            chosen = t
            break
        key = (-agree, cost, float(t))
        if best is None or key < best:
            best = key
    if chosen is None:
        assert best is not None
        chosen = best[2]
    stops = cascade_stops(confidence, chosen)
    correct = int((winners[rows, stops] == reference).sum())
    share = np.bincount(stops, minlength=m) / n
    agreement = wilson(correct, n)
    return CascadeCalibration(
        threshold=float(chosen),
        agreement=agreement,
        escalated=wilson(int((stops > 0).sum()), n),
        stop_share=tuple(float(x) for x in share),
        expected_cost=expected_cascade_cost(costs, share),
        all_cost=float(costs.sum()),
        target=target,
        target_met=bool(agreement.value is not None and agreement.value >= target - _EPS),
        n=n,
    )


# -- single-answer grading ------------------------------------------------------------

SCORE_AGGREGATIONS = ("mean", "median")


@dataclass(frozen=True)
class ScoreAggregate:
    """A panel's grade of one thread: the mean or median of its members' grades (and of
    each criterion's); ``score`` None when nobody graded."""

    score: float | None
    voted: int
    members: int
    criteria: dict[str, float] = field(default_factory=dict)


def aggregate_scores(
    rule: str, scores: Sequence[float | None], criteria: Sequence[Mapping[str, float] | None]
) -> ScoreAggregate:
    """The panel's grade under ``rule`` (``mean`` or ``median``) of the members that graded
    (None: missing)."""
    if rule not in SCORE_AGGREGATIONS:
        raise ValueError(f"a panel of graders aggregates by mean or median, not {rule!r}")
    centre = np.mean if rule == "mean" else np.median
    graded = [k for k, s in enumerate(scores) if s is not None]
    if not graded:
        return ScoreAggregate(None, 0, len(scores))
    per_criterion: dict[str, list[float]] = {}
    for k in graded:
        for name, value in (criteria[k] or {}).items():
            per_criterion.setdefault(name, []).append(value)
    return ScoreAggregate(
        float(centre([scores[k] for k in graded])),
        len(graded),
        len(scores),
        {name: float(centre(values)) for name, values in per_criterion.items()},
    )
