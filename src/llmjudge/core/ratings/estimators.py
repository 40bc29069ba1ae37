"""Elo and Bradley-Terry ratings with bootstrap confidence intervals.

Bradley-Terry is the primary ranking. Model: P(i beats j) = 1 / (1 + exp(theta_j - theta_i));
a tie counts as half a win to each side. The fit maximises the log-likelihood plus a
Gaussian prior N(0, 1/prior) on each theta (an L2 penalty prior/2 * sum(theta^2)). With the
default prior of 0.01 (a standard deviation of 10 logits, about 1,700 Elo points) the
prior is negligible wherever a thread has data, but keeps a thread that never lost (or
never won) finite and makes the problem strictly concave, so threads in disconnected
groups are still comparable (each group is centred on the common mean).

The solver is Newton's method with the Hessian applied matrix-free (np.bincount over the
unique pairs) inside Jacobi-preconditioned conjugate gradients, with a backtracking line
search: memory O(threads + comparisons), no threads x threads matrix.
Scores are reported on the Elo scale: 1500 + 400 * log10(strength), centred on 1500.

One module of about 600 lines on purpose: Elo and every Bradley-Terry variant (weights,
clusters, bootstrap, sandwich) share one pair index and one penalised Newton solver.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.sparse import csr_array, diags_array
from scipy.sparse.linalg import LinearOperator, cg
from scipy.special import expit
from scipy.stats import norm

from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable, as_table, map_ids

ELO_BASE = 1500.0
ELO_K = 32.0
ELO_SCALE = 400.0 / math.log(10.0)  # Elo points per logit
DEFAULT_PRIOR = 0.01
DEFAULT_BOOTSTRAP_ROUNDS = 200


@dataclass(frozen=True)
class Rating:
    player_id: int  # thread id, or pillar id for pillar ratings
    score: float  # Elo scale, mean 1500
    ci_low: float | None  # None without bootstrap
    ci_high: float | None
    rank: int


@dataclass(frozen=True)
class BTRatings:
    """Bradley-Terry ratings, best first."""

    ratings: list[Rating]
    bootstrap_rounds: int
    confidence: float
    prior: float

    def by_player(self) -> dict[int, Rating]:
        return {r.player_id: r for r in self.ratings}


# --- Elo -------------------------------------------------------------------------------


def elo_array(table: OutcomeTable, *, initial: float = ELO_BASE, k: float = ELO_K) -> np.ndarray:
    """Sequential Elo over the table's canonical (completed_order, comparison_id) order."""
    ratings = [initial] * table.n_players
    # a plain loop over Python lists: Elo is sequential, and list indexing is far
    # cheaper than numpy scalar access
    for i, j, s in zip(table.a.tolist(), table.b.tolist(), table.score_a.tolist(), strict=True):
        ri, rj = ratings[i], ratings[j]
        delta = k * (s - 1.0 / (1.0 + 10.0 ** ((rj - ri) / 400.0)))
        ratings[i] = ri + delta
        ratings[j] = rj - delta
    return np.asarray(ratings)


def elo(
    outcomes: OutcomeTable | Iterable[Outcome], *, initial: float = ELO_BASE, k: float = ELO_K
) -> dict[int, float]:
    """Elo per thread: start 1500, K=32, ties 0.5, replayed by (completed_order, id)."""
    table = as_table(outcomes)
    return dict(
        zip(table.players.tolist(), elo_array(table, initial=initial, k=k).tolist(), strict=True)
    )


# --- Bradley-Terry fit -----------------------------------------------------------------


@dataclass(frozen=True)
class PairIndex:
    """Outcomes grouped by unordered pair (lo < hi): the fit works on pair totals.

    Also holds the sparsity pattern of the Hessian (a weighted graph Laplacian), so each
    Newton step only refills its values: O(pairs) memory, no threads x threads matrix.
    """

    lo: np.ndarray  # (p,) player index
    hi: np.ndarray
    row_pair: np.ndarray  # (m,) pair of each outcome
    lo_score: np.ndarray  # (m,) result of each outcome for the pair's lo player
    n_players: int
    indptr: np.ndarray  # CSR pattern of the off-diagonal Hessian, both (lo,hi) and (hi,lo)
    indices: np.ndarray
    entry_pair: np.ndarray  # pair of each CSR entry

    @classmethod
    def build(cls, a: np.ndarray, b: np.ndarray, score_a: np.ndarray, n_players: int) -> PairIndex:
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        keys, row_pair = np.unique(lo * n_players + hi, return_inverse=True)
        pair_lo, pair_hi = keys // n_players, keys % n_players
        rows = np.concatenate([pair_lo, pair_hi])
        cols = np.concatenate([pair_hi, pair_lo])
        entry = np.argsort(rows * n_players + cols)
        return cls(
            lo=pair_lo,
            hi=pair_hi,
            row_pair=row_pair.ravel(),
            lo_score=np.where(a == lo, score_a, 1.0 - score_a),
            n_players=n_players,
            # int32 indices (fine below 2**31 entries) keep the sparse products fast
            indptr=np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_players))]).astype(
                np.int32
            ),
            indices=cols[entry].astype(np.int32),
            entry_pair=entry % keys.size,
        )

    def laplacian(self, h: np.ndarray, prior: float) -> tuple[csr_array, np.ndarray]:
        """(L, diag L): the weighted graph Laplacian with weight h per pair plus prior * I,
        the Hessian of every pairwise logit model here in theta."""
        n = self.n_players
        diag = np.bincount(self.lo, h, n) + np.bincount(self.hi, h, n) + prior
        off = csr_array((-h[self.entry_pair], self.indices, self.indptr), shape=(n, n))
        return (off + diags_array(diag)).tocsr(), diag

    def totals(self, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(wins of lo, games) per pair; `weights` counts each outcome (bootstrap)."""
        p = self.lo.size
        lo_weights = self.lo_score if weights is None else self.lo_score * weights
        wins = np.bincount(self.row_pair, weights=lo_weights, minlength=p)
        games = np.bincount(self.row_pair, weights=weights, minlength=p).astype(np.float64)
        return wins, games


def block_pcg(
    matmat: Callable[[np.ndarray], np.ndarray],
    rhs: np.ndarray,
    diag: np.ndarray,
    *,
    rtol: float,
    maxiter: int = 2_000,
) -> np.ndarray:
    """Jacobi-preconditioned conjugate gradients on several right-hand sides at once
    (columns of `rhs`, each its own CG): one sparse x dense product per iteration serves
    them all, which is several times faster than one sparse product per column."""
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = r / diag[:, None]
    p = z.copy()
    rz = np.sum(r * z, axis=0)
    stop = rtol * np.sqrt(np.sum(rhs * rhs, axis=0))
    for _ in range(maxiter):
        active = np.sqrt(np.sum(r * r, axis=0)) > stop
        if not active.any():
            break
        q = matmat(p)
        pq = np.sum(p * q, axis=0)
        alpha = np.where(active & (pq > 0), rz / np.where(pq > 0, pq, 1.0), 0.0)
        x += alpha * p
        r -= alpha * q
        z = r / diag[:, None]
        rz_new = np.sum(r * z, axis=0)
        beta = np.where(active, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
        p = z + beta * p
        rz = rz_new
    return x


def fit_bradley_terry(
    pairs: PairIndex,
    wins: np.ndarray,
    games: np.ndarray,
    *,
    prior: float = DEFAULT_PRIOR,
    init: np.ndarray | None = None,
    tol: float = 1e-6,
    max_iter: int = 100,
    cg_rtol: float = 1e-6,
) -> np.ndarray:
    """Maximum a posteriori log-strengths (natural logits), one per player; mean 0.

    `wins`/`games` are per pair of `pairs` (wins of the lo player, ties counted half).
    Stops when the largest Newton step is below `tol` logits (1e-6 logits is 4e-4 Elo
    points), or when the objective can no longer resolve an improvement (rounding floor).
    """
    if prior <= 0:
        raise ValueError("prior must be positive so every strength is finite")
    lo, hi, n = pairs.lo, pairs.hi, pairs.n_players
    theta = np.zeros(n) if init is None else np.array(init, dtype=np.float64)
    if n == 0:
        return theta

    def objective(t: np.ndarray) -> tuple[float, np.ndarray]:
        # wins*log(1+e^-d) + losses*log(1+e^d) == games*softplus(d) - wins*d
        d = t[lo] - t[hi]
        softplus = np.maximum(d, 0.0) + np.log1p(np.exp(-np.abs(d)))
        # elementwise sums, not BLAS dot: multithreaded OpenBLAS dots on long vectors
        # slow down 100x when the cores are busy
        return float(np.sum(games * softplus - wins * d) + 0.5 * prior * np.sum(t * t)), d

    value, d = objective(theta)
    for _ in range(max_iter):
        p = expit(d)
        r = wins - games * p
        grad = np.bincount(hi, r, n) - np.bincount(lo, r, n) + prior * theta
        h = games * p * (1.0 - p)
        diag = np.bincount(lo, h, n) + np.bincount(hi, h, n) + prior
        off_diag = csr_array((-h[pairs.entry_pair], pairs.indices, pairs.indptr), shape=(n, n))
        hess = LinearOperator(
            (n, n), matvec=lambda v, a=off_diag, g=diag: g * v + a @ v, dtype=np.float64
        )
        jacobi = LinearOperator((n, n), matvec=lambda v, g=diag: v / g, dtype=np.float64)
        step, _ = cg(hess, -grad, M=jacobi, rtol=cg_rtol, maxiter=500)
        if np.max(np.abs(step), initial=0.0) < tol:
            # inside the quadratic-convergence region; the objective could no longer
            # resolve the change anyway
            theta += step
            break
        # backtracking (Armijo): full Newton steps can overshoot far from the optimum
        slope = float(grad @ step)
        t = 1.0
        while t >= 1e-6:
            candidate = theta + t * step
            new_value, new_d = objective(candidate)
            if new_value <= value + 1e-4 * t * slope:
                theta, value, d = candidate, new_value, new_d
                break
            t *= 0.5
        else:
            break
    return theta - theta.mean()


def bootstrap_bradley_terry(
    pairs: PairIndex,
    theta_hat: np.ndarray,
    *,
    rounds: int,
    seed: int,
    prior: float = DEFAULT_PRIOR,
) -> np.ndarray:
    """(rounds, players) centred log-strengths, each fit on comparisons resampled with
    replacement and warm-started from the point estimate.

    A thread absent from a resample falls back to the prior mean there, which widens the
    interval of rarely compared threads, as their uncertainty warrants.
    """
    rng = np.random.default_rng(seed)
    m = pairs.row_pair.size
    samples = np.empty((rounds, pairs.n_players))
    for i in range(rounds):
        counts = np.bincount(rng.integers(0, m, m), minlength=m)
        wins, games = pairs.totals(counts)
        samples[i] = fit_bradley_terry(
            pairs, wins, games, prior=prior, init=theta_hat, tol=1e-4, cg_rtol=1e-3
        )
    return samples


def ranks_from_intervals(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Rank = 1 + number of players whose lower bound is above this player's upper bound.

    Only separations the intervals support change a rank (as LMSYS Chatbot Arena does);
    overlapping players share ranks.
    """
    sorted_low = np.sort(low)
    return 1 + low.size - np.searchsorted(sorted_low, high, side="right")


def to_elo_scale(theta: np.ndarray) -> np.ndarray:
    return ELO_BASE + ELO_SCALE * (theta - theta.mean(axis=-1, keepdims=True))


def bradley_terry(
    outcomes: OutcomeTable | Iterable[Outcome],
    *,
    bootstrap_rounds: int = DEFAULT_BOOTSTRAP_ROUNDS,
    seed: int = 0,
    confidence: float = 0.95,
    prior: float = DEFAULT_PRIOR,
    weights: np.ndarray | None = None,
    clusters: ClusterBy | np.ndarray | None = None,
) -> BTRatings:
    """Bradley-Terry scores on the Elo scale with percentile bootstrap intervals.

    With bootstrap_rounds=0 there are no intervals and rank = 1 + number of players
    with a strictly higher score. `weights` (m,), aligned with `as_table(outcomes)` rows,
    weights each verdict (see verdict_weights). `clusters` ("pair", "swap" or an (m,)
    array of ids aligned with the table rows) makes the bootstrap resample clusters
    (cluster_bootstrap_bradley_terry); None resamples single comparisons i.i.d.
    """
    table = as_table(outcomes)
    if table.n_players == 0:
        return BTRatings(ratings=[], bootstrap_rounds=0, confidence=confidence, prior=prior)
    pairs = PairIndex.build(table.a, table.b, table.score_a, table.n_players)
    row_weights = None if weights is None else np.asarray(weights, dtype=np.float64)
    wins, games = pairs.totals(row_weights)
    theta = fit_bradley_terry(pairs, wins, games, prior=prior)
    scores = to_elo_scale(theta)
    if bootstrap_rounds > 0:
        if clusters is None and row_weights is None:
            raw = bootstrap_bradley_terry(
                pairs, theta, rounds=bootstrap_rounds, seed=seed, prior=prior
            )
        else:
            ids = (
                np.arange(len(table))
                if clusters is None
                else comparison_clusters(table, clusters)
                if isinstance(clusters, str)
                else np.unique(np.asarray(clusters), return_inverse=True)[1].ravel()
            )
            raw = cluster_bootstrap_bradley_terry(
                pairs,
                theta,
                ids,
                rounds=bootstrap_rounds,
                seed=seed,
                prior=prior,
                weights=row_weights,
            )
        low, high = percentile_interval(to_elo_scale(raw), confidence)
        ranks = ranks_from_intervals(low, high)
        ci_low: list[float | None] = low.tolist()
        ci_high: list[float | None] = high.tolist()
    else:
        ranks = ranks_from_intervals(scores, scores)
        ci_low = ci_high = [None] * table.n_players
    order = np.lexsort((table.players, -scores))
    ratings = [
        Rating(
            player_id=int(table.players[i]),
            score=float(scores[i]),
            ci_low=ci_low[i],
            ci_high=ci_high[i],
            rank=int(ranks[i]),
        )
        for i in order.tolist()
    ]
    return BTRatings(
        ratings=ratings,
        bootstrap_rounds=bootstrap_rounds,
        confidence=confidence,
        prior=prior,
    )


def pillar_bradley_terry(
    outcomes: OutcomeTable | Iterable[Outcome],
    thread_pillar: Mapping[int, int],
    *,
    bootstrap_rounds: int = DEFAULT_BOOTSTRAP_ROUNDS,
    seed: int = 0,
    confidence: float = 0.95,
    prior: float = DEFAULT_PRIOR,
    clusters: ClusterBy | None = None,
) -> BTRatings:
    """Bradley-Terry with pillars as players: every cross-pillar outcome is a game
    between the two pillars; outcomes within one pillar carry no information and are dropped.

    `clusters` is computed on the THREAD table before mapping (a cluster of pillars would
    leave a handful of clusters), so "pair" keeps each pair of threads together.
    """
    table = as_table(outcomes)
    ids: np.ndarray | None = None
    if clusters is not None:
        thread_ids = comparison_clusters(table, clusters)
        new_ids = map_ids(table.players, thread_pillar)
        # map_players keeps the surviving rows in order
        ids = thread_ids[new_ids[table.a] != new_ids[table.b]]
    return bradley_terry(
        table.map_players(thread_pillar),
        bootstrap_rounds=bootstrap_rounds,
        seed=seed,
        confidence=confidence,
        prior=prior,
        clusters=ids,
    )


# --- Honest intervals: clusters, cluster bootstrap, sandwich -------------------------

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


def cluster_bootstrap_bradley_terry(
    pairs: PairIndex,
    theta_hat: np.ndarray,
    clusters: np.ndarray,
    *,
    rounds: int,
    seed: int,
    prior: float = DEFAULT_PRIOR,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """(rounds, players) centred log-strengths, each fit on CLUSTERS resampled with
    replacement (all rows of a drawn cluster come along), warm-started from `theta_hat`.

    `clusters` is (m,) 0..C-1 aligned with the rows given to PairIndex.build (see
    comparison_clusters); `weights` (m,) weights each row (strong verdicts).
    With one cluster per row this is the i.i.d. bootstrap.
    """
    clusters = np.asarray(clusters, dtype=np.int64)
    if clusters.size != pairs.row_pair.size:
        raise ValueError("one cluster id per comparison")
    n_clusters = int(clusters.max()) + 1 if clusters.size else 0
    rng = np.random.default_rng(seed)
    samples = np.empty((rounds, pairs.n_players))
    for i in range(rounds):
        counts = np.bincount(rng.integers(0, n_clusters, n_clusters), minlength=n_clusters)
        row_weights = counts[clusters].astype(np.float64)
        if weights is not None:
            row_weights *= weights
        wins, games = pairs.totals(row_weights)
        samples[i] = fit_bradley_terry(
            pairs, wins, games, prior=prior, init=theta_hat, tol=1e-4, cg_rtol=1e-3
        )
    return samples


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


# --- Elo scale, ordering -------------------------------------------------------------


def elo_scale(
    theta: np.ndarray, *, base: float = ELO_BASE, baseline: int | None = None
) -> np.ndarray:
    """Log-strengths (..., players) on the Elo scale, 400/ln 10 points per logit,
    anchored so the mean player (baseline None) or player index `baseline` scores
    `base` (1000 or 1500 are the usual choices). Works row-wise on bootstrap samples, so
    intervals transform with their estimate; a baseline's own interval is then zero
    wide, as it is the reference."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape[-1] == 0:  # no players: nothing to anchor
        return theta + base
    anchor = theta.mean(axis=-1, keepdims=True) if baseline is None else theta[..., baseline, None]
    return base + ELO_SCALE * (theta - anchor)


def leaderboard_order(ranks: np.ndarray, scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Indices best first: by interval rank, then by score within a rank, then by id."""
    return np.lexsort((np.asarray(ids), -np.asarray(scores), np.asarray(ranks)))
