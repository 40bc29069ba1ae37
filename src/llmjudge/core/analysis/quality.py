"""Quality of a tournament: is its ranking resolved, stable, and does it match a reference?

These tell the user whether to buy more comparisons:
- separability: the share of pairs whose intervals do not overlap (all, or the top k);
- rank stability: how far each player's rank moves across bootstrap rounds;
- agreement with a reference ranking (Spearman, Kendall), when one exists;
- dominant_position_bias: a position bias is named only when its exact test rejects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import binomtest, kendalltau, rankdata, spearmanr

Bias = Literal["primacy", "recency", "none"]
BIAS_ALPHA = 0.05


@dataclass(frozen=True)
class Separability:
    share: float | None  # separated pairs / pairs; None below two players
    separated_pairs: int
    pairs: int
    players: int  # players considered (all, or the top k by score)


def separability(
    low: np.ndarray, high: np.ndarray, *, scores: np.ndarray | None = None, top_k: int | None = None
) -> Separability:
    """Share of player pairs whose intervals [low, high] do not overlap.

    O(n log n): pair (i, j) is separated iff low_i > high_j or low_j > high_i, and at most
    one of the two holds, so the count is sum_i #{j : high_j < low_i}. With `top_k`, only
    the k best by `scores` (default: interval midpoint) are considered.
    """
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    if top_k is not None:
        centre = (low + high) / 2.0 if scores is None else np.asarray(scores, np.float64)
        best = np.argsort(-centre, kind="stable")[: max(top_k, 0)]
        low, high = low[best], high[best]
    n = int(low.size)
    pairs = n * (n - 1) // 2
    separated = int(np.searchsorted(np.sort(high), low, side="left").sum())
    return Separability(
        share=separated / pairs if pairs else None,
        separated_pairs=separated,
        pairs=pairs,
        players=n,
    )


@dataclass(frozen=True, eq=False)
class RankStability:
    rank: np.ndarray  # (players,) rank of the point estimate, 1 = best
    mean_abs_shift: np.ndarray  # (players,) mean |rank in round - rank|
    held_share: np.ndarray  # (players,) share of rounds with exactly its rank
    rank_low: np.ndarray  # (players,) 2.5th / 97.5th percentile of its bootstrap rank
    rank_high: np.ndarray
    overall_mean_abs_shift: float | None  # mean over players; None without rounds
    rounds: int


def ordinal_ranks(scores: np.ndarray) -> np.ndarray:
    """Ranks 1 = highest along the last axis; ties get the best (minimum) rank."""
    return rankdata(-np.asarray(scores, np.float64), method="min", axis=-1).astype(np.int64)


def rank_stability(
    estimate: np.ndarray, samples: np.ndarray, *, level: float = 0.95
) -> RankStability:
    """How the ranking moves across bootstrap rounds: `estimate` (players,), `samples`
    (rounds, players) of the same scores (any monotone scale)."""
    rank = ordinal_ranks(estimate)
    samples = np.asarray(samples, np.float64).reshape(-1, rank.size)
    rounds = samples.shape[0]
    if rounds == 0:
        empty = np.full(rank.size, np.nan)
        return RankStability(rank, empty, empty, empty, empty, None, 0)
    ranks = ordinal_ranks(samples)
    shift = np.abs(ranks - rank)
    tail = 50.0 * (1.0 - level)
    rank_low, rank_high = np.percentile(ranks, [tail, 100.0 - tail], axis=0)
    return RankStability(
        rank=rank,
        mean_abs_shift=shift.mean(axis=0),
        held_share=(shift == 0).mean(axis=0),
        rank_low=rank_low,
        rank_high=rank_high,
        overall_mean_abs_shift=float(shift.mean()) if rank.size else None,
        rounds=rounds,
    )


@dataclass(frozen=True)
class Agreement:
    n: int  # players present in both
    spearman: float | None  # None below 3 players or with a constant input
    spearman_p: float | None
    kendall: float | None  # tau-b
    kendall_p: float | None


def reference_agreement(scores: np.ndarray, reference: np.ndarray) -> Agreement:
    """Rank agreement of `scores` with a reference (scores or ranks; higher = better for
    both, so pass -rank for ranks). NaN in either marks a player missing there."""
    x, y = np.asarray(scores, np.float64), np.asarray(reference, np.float64)
    both = ~(np.isnan(x) | np.isnan(y))
    x, y = x[both], y[both]
    n = int(x.size)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return Agreement(n, None, None, None, None)
    rho = spearmanr(x, y)
    tau = kendalltau(x, y)
    return Agreement(
        n=n,
        spearman=_finite(rho.statistic),
        spearman_p=_finite(rho.pvalue),
        kendall=_finite(tau.statistic),
        kendall_p=_finite(tau.pvalue),
    )


@dataclass(frozen=True)
class BiasTest:
    dominant: Bias  # "none" unless the test rejects at alpha
    p_value: float | None  # exact two-sided binomial test; None without biased pairs
    primacy: int
    recency: int
    alpha: float


def dominant_position_bias(primacy: int, recency: int, *, alpha: float = BIAS_ALPHA) -> BiasTest:
    """Name a dominant position bias only when the exact two-sided binomial test of
    primacy vs recency counts (H0: p = 1/2) rejects at `alpha`.

    Today's rule in position.py names the larger count whatever the evidence; a finding
    should use this one. Counts are the inconsistent swap pairs of each kind.
    """
    total = primacy + recency
    if total == 0:
        return BiasTest("none", None, primacy, recency, alpha)
    p = float(binomtest(primacy, total, 0.5).pvalue)
    dominant: Bias = "none"
    if p < alpha:
        dominant = "primacy" if primacy > recency else "recency"
    return BiasTest(dominant, p, primacy, recency, alpha)


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
