"""Honest intervals for Bradley-Terry ratings, and the ranks they support.

Which verdicts are not independent (clusters), verdict weights, percentile and Wald
intervals, the cluster-robust sandwich, and ranks read from intervals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.linalg import LinearOperator, cg
from scipy.special import expit
from scipy.stats import norm

from llmjudge.core.analysis.outcomes import OutcomeTable
from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR

ClusterBy = Literal["pair", "swap"]
DEFAULT_LEVEL = 0.95
STRONG_WEIGHT_ARENA_HARD = 3.0  # Arena-Hard counts A>>B as three wins
SANDWICH_MAX_DENSE = 2_000  # players; above it the diagonal is estimated by random probes


def comparison_clusters(table: OutcomeTable, by: ClusterBy = "pair") -> np.ndarray:
    """(m,) cluster id 0..C-1 per row of `table`: rows whose verdicts are not independent.

    - `pair`: every verdict on one unordered pair of threads (its swap twin and its
      repetitions included) is one cluster. The honest default: the judge sees the same
      two answers each time, so its verdicts on them are correlated.
    - `swap`: an original and its swapped twin share a cluster; every other row is alone.
    """
    if by == "pair":
        n = max(table.n_players, 1)
        key = np.minimum(table.a, table.b) * n + np.maximum(table.a, table.b)
    elif by == "swap":
        # rows without a swap group get negative keys of their own
        key = np.where(table.swap_group >= 0, table.swap_group, -1 - np.arange(len(table)))
    else:
        raise ValueError(f"unknown clustering {by!r}; choose 'pair' or 'swap'")
    return np.unique(key, return_inverse=True)[1].ravel().astype(np.int64)


def verdict_weights(
    strengths: Sequence[str | int | None] | np.ndarray, strong_weight: float = 1.0
) -> np.ndarray:
    """(m,) weight per verdict: a strong verdict (A>>B; "strong" or 2) counts as
    `strong_weight` wins, any other (weak, tie, unknown) as one. Off by default (1.0);
    Arena-Hard uses 3 (STRONG_WEIGHT_ARENA_HARD)."""
    if strong_weight <= 0:
        raise ValueError("strong_weight must be positive")
    values = np.asarray(strengths, dtype=object)
    strong = (values == "strong") | (values == 2)
    return np.where(strong.astype(bool), float(strong_weight), 1.0)


def percentile_interval(
    samples: np.ndarray, level: float = DEFAULT_LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) per column of (rounds, players) bootstrap samples at `level`."""
    if not 0.0 < level < 1.0:
        raise ValueError("level must be between 0 and 1")
    tail = 50.0 * (1.0 - level)
    low, high = np.percentile(samples, [tail, 100.0 - tail], axis=0)
    return low, high


def normal_interval(
    estimate: np.ndarray, se: np.ndarray, level: float = DEFAULT_LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """Wald interval estimate -/+ z * se at `level` (for sandwich standard errors)."""
    z = float(norm.ppf(0.5 + level / 2.0))
    return estimate - z * se, estimate + z * se


def _laplacian_matvec(
    lo: np.ndarray, hi: np.ndarray, h: np.ndarray, n: int, prior: float
) -> LinearOperator:
    def matvec(v: np.ndarray) -> np.ndarray:
        u = h * (v[lo] - v[hi])
        return np.bincount(lo, u, n) - np.bincount(hi, u, n) + prior * v

    return LinearOperator((n, n), matvec=matvec, dtype=np.float64)


def sandwich_bradley_terry(
    a: np.ndarray,
    b: np.ndarray,
    score_a: np.ndarray,
    n_players: int,
    theta: np.ndarray,
    clusters: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    prior: float = DEFAULT_PRIOR,
    max_dense: int = SANDWICH_MAX_DENSE,
    probes: int = 200,
    seed: int = 0,
) -> np.ndarray:
    """(players,) cluster-robust (sandwich) standard errors of the centred log-strengths.

    Cov = H^-1 B H^-1 * C/(C-1), H the Hessian of the penalised negative log-likelihood
    at `theta`, B the sum over clusters of the outer product of each cluster's summed
    score: correlated verdicts within a cluster add up instead of averaging out.
    Up to `max_dense` players it is exact (dense n x n); above, the diagonal is a
    Hutchinson estimate from `probes` Rademacher probes over clusters, each one
    conjugate-gradient solve (relative error about sqrt(2 / probes)).
    """
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    n, m = n_players, a.size
    w = np.ones(m) if weights is None else np.asarray(weights, np.float64)
    clusters = np.asarray(clusters, np.int64)
    n_clusters = int(clusters.max()) + 1 if m else 0
    if n == 0 or n_clusters < 2:
        return np.full(n, np.nan)
    p = expit(theta[a] - theta[b])
    r = w * (np.asarray(score_a, np.float64) - p)  # d loglik / d (theta_a - theta_b)
    h = w * p * (1.0 - p)
    correction = n_clusters / (n_clusters - 1)
    if n <= max_dense:
        hess = np.zeros((n, n))
        np.add.at(hess, (a, b), -h)
        hess += hess.T
        hess[np.diag_indices(n)] = np.bincount(a, h, n) + np.bincount(b, h, n) + prior
        rows = np.concatenate([a, b])
        cols = np.concatenate([clusters, clusters])
        scores = csr_array(
            (np.concatenate([r, -r]), (rows, cols)), shape=(n, n_clusters)
        )  # (n, C): duplicates summed, so each column is one cluster's score
        meat = (scores @ scores.T).toarray()
        inv = np.linalg.inv(hess)
        cov = inv @ meat @ inv * correction
        centre = np.eye(n) - 1.0 / n
        return np.sqrt(np.maximum(np.diag(centre @ cov @ centre), 0.0))
    hess_op = _laplacian_matvec(a, b, h, n, prior)
    diag = np.bincount(a, h, n) + np.bincount(b, h, n) + prior
    jacobi = LinearOperator((n, n), matvec=lambda v: v / diag, dtype=np.float64)
    rng = np.random.default_rng(seed)
    total = np.zeros(n)
    for _ in range(probes):
        z = rng.choice((-1.0, 1.0), n_clusters)[clusters] * r
        x, _ = cg(hess_op, np.bincount(a, z, n) - np.bincount(b, z, n), M=jacobi, rtol=1e-6)
        x -= x.mean()  # centring: P H^-1 S z
        total += x * x
    return np.sqrt(total / probes * correction)


def ranks_from_intervals(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Rank = 1 + number of players whose lower bound is above this player's upper bound.

    Only separations the intervals support change a rank (as LMSYS Chatbot Arena does);
    overlapping players share ranks.
    """
    sorted_low = np.sort(low)
    return 1 + low.size - np.searchsorted(sorted_low, high, side="right")


def leaderboard_order(ranks: np.ndarray, scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Indices best first: by interval rank, then by score within a rank, then by id."""
    return np.lexsort((np.asarray(ids), -np.asarray(scores), np.asarray(ranks)))
