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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.linalg import LinearOperator, cg
from scipy.special import expit

from llmjudge.analysis.outcomes import Outcome, OutcomeTable, as_table

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

    def totals(self, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(wins of lo, games) per pair; `weights` counts each outcome (bootstrap)."""
        p = self.lo.size
        lo_weights = self.lo_score if weights is None else self.lo_score * weights
        wins = np.bincount(self.row_pair, weights=lo_weights, minlength=p)
        games = np.bincount(self.row_pair, weights=weights, minlength=p).astype(np.float64)
        return wins, games


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
) -> BTRatings:
    """Bradley-Terry scores on the Elo scale with percentile bootstrap intervals.

    With bootstrap_rounds=0 there are no intervals and rank = 1 + number of players
    with a strictly higher score.
    """
    table = as_table(outcomes)
    if table.n_players == 0:
        return BTRatings(ratings=[], bootstrap_rounds=0, confidence=confidence, prior=prior)
    pairs = PairIndex.build(table.a, table.b, table.score_a, table.n_players)
    wins, games = pairs.totals()
    theta = fit_bradley_terry(pairs, wins, games, prior=prior)
    scores = to_elo_scale(theta)
    if bootstrap_rounds > 0:
        samples = to_elo_scale(
            bootstrap_bradley_terry(pairs, theta, rounds=bootstrap_rounds, seed=seed, prior=prior)
        )
        tail = 50.0 * (1.0 - confidence)
        low, high = np.percentile(samples, [tail, 100.0 - tail], axis=0)
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
) -> BTRatings:
    """Bradley-Terry with pillars as players: every cross-pillar outcome is a game
    between the two pillars; outcomes within one pillar carry no information and are dropped."""
    return bradley_terry(
        as_table(outcomes).map_players(thread_pillar),
        bootstrap_rounds=bootstrap_rounds,
        seed=seed,
        confidence=confidence,
        prior=prior,
    )
