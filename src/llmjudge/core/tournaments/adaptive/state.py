"""Adaptive state: the Bradley-Terry fit of the outcomes so far and its Laplace uncertainty.

Uncertainty is the Laplace approximation: the inverse of the penalised log-likelihood's
Hessian at the fit (a weighted graph Laplacian plus the prior). It is exact (dense) up to
``dense_limit`` players and the diagonal (Fisher) approximation above it, so memory stays
O(players + comparisons) for huge fields.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
from scipy.linalg.lapack import dpotrf, dpotri
from scipy.special import expit, ndtri

from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR as RATINGS_PRIOR
from llmjudge.core.ratings.bradley_terry import PairIndex, fit_bradley_terry

try:  # optional (installed with scikit-learn); without it BLAS keeps its own threads
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover
    ThreadpoolController = None

# created after scipy.linalg is loaded, so it sees scipy's OpenBLAS
_BLAS = ThreadpoolController() if ThreadpoolController is not None else None

DENSE_LIMIT = 1000  # players; above it the covariance is diagonal (n^3 inverse per round)
# Two fits, one prior for what is shown. The design (which pairs next, when to stop) reads
# the evidence alone: a prior of 0.04 of a drawn game, negligible beside any data. Under the
# ratings' prior (0.5, two drawn games) the ranking rule's rank intervals kept narrowing as
# the prior's pull lifted, so no simulated run over 40 threads stopped within a free-for-all
# (at 0.01, 4 of 5 did) -- even with the rule reading an evidence fit, when the pairs were
# chosen under 0.5 (0 of 5); the pairs chosen under 0.5 ranked about the same (100 threads, tau
# at a third of a free-for-all 0.927 shown against 0.922 here, within the runs' spread).
DEFAULT_PRIOR = 0.01
# The ranking a session shows (the adaptive table, GET /api/sessions/{id}/adaptive) is
# refitted with the ratings' prior, so it reads on the leaderboard's scale.
SHOWN_PRIOR = RATINGS_PRIOR


@dataclass(frozen=True, eq=False)
class AdaptiveState:
    """The Bradley-Terry fit of the outcomes so far, with its Laplace uncertainty."""

    theta: np.ndarray  # (n,) log-strengths (natural logits), mean 0
    games: np.ndarray  # (n,) comparisons each player took part in
    var: np.ndarray  # (n,) marginal variance of each centred theta
    cov: np.ndarray | None  # (n, n) covariance when n <= dense_limit, else None
    precision_diag: np.ndarray  # (n,) diagonal of the Hessian (the diagonal approximation)
    n_comparisons: int

    @property
    def n(self) -> int:
        return int(self.theta.size)

    def diff_var(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Variance of theta_i - theta_j (exact with the dense covariance)."""
        if self.cov is not None:
            c = self.cov
            return np.maximum(c[i, i] + c[j, j] - 2.0 * c[i, j], 1e-12)
        return 1.0 / self.precision_diag[i] + 1.0 / self.precision_diag[j]

    def order(self) -> np.ndarray:
        """Player indices best first (ties by index)."""
        return np.lexsort((np.arange(self.n), -self.theta))

    def intervals(self, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        z = z_value(confidence, two_sided=True)
        sd = np.sqrt(self.var)
        return self.theta - z * sd, self.theta + z * sd

    def rank_intervals(self, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """(best, worst) possible rank of each player (1 = best) from the theta intervals:
        best = 1 + players surely above, worst = n - players surely below."""
        low, high = self.intervals(confidence)
        sorted_low, sorted_high = np.sort(low), np.sort(high)
        above = self.n - np.searchsorted(sorted_low, high, side="right")
        below = np.searchsorted(sorted_high, low, side="left")
        return 1 + above, self.n - below


def fit_state(
    n: int,
    a: np.ndarray,
    b: np.ndarray,
    score_a: np.ndarray,
    *,
    init: np.ndarray | None = None,
    prior: float = DEFAULT_PRIOR,
    dense_limit: int = DENSE_LIMIT,
) -> AdaptiveState:
    """Fit the outcomes (players ``a`` vs ``b`` in 0..n-1, ``score_a`` 1/0.5/0 for ``a``).

    ``init`` warm-starts the Newton solver from the previous round's ``theta``.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    score_a = np.asarray(score_a, dtype=np.float64)
    if n < 1:
        raise ValueError("at least one player")
    if a.size and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= n or np.any(a == b)):
        raise ValueError("players must be distinct indices in 0..n-1")
    games = np.bincount(a, minlength=n) + np.bincount(b, minlength=n)
    if a.size == 0:
        theta = np.zeros(n)
        lo = hi = np.empty(0, dtype=np.int64)
        h = np.empty(0)
    else:
        pairs = PairIndex.build(a, b, score_a, n)
        wins, totals = pairs.totals()
        start = None if init is None or len(init) != n else np.asarray(init, dtype=np.float64)
        theta = fit_bradley_terry(pairs, wins, totals, prior=prior, init=start)
        lo, hi = pairs.lo, pairs.hi
        p = expit(theta[lo] - theta[hi])
        h = totals * p * (1.0 - p)
    return _laplace_state(theta, games, lo, hi, h, prior, dense_limit, int(a.size))


def state_at(
    theta: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    *,
    prior: float = DEFAULT_PRIOR,
    dense_limit: int = DENSE_LIMIT,
) -> AdaptiveState:
    """The Laplace state of the comparisons ``a`` vs ``b`` at given strengths ``theta``
    instead of at their fit (an oracle that knows the truth: ``bench/adaptive.py``)."""
    theta = np.asarray(theta, dtype=np.float64)
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    n = theta.size
    games = np.bincount(a, minlength=n) + np.bincount(b, minlength=n)
    p = expit(theta[a] - theta[b])
    return _laplace_state(theta, games, a, b, p * (1.0 - p), prior, dense_limit, int(a.size))


def _laplace_state(
    theta: np.ndarray,
    games: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    h: np.ndarray,
    prior: float,
    dense_limit: int,
    n_comparisons: int,
) -> AdaptiveState:
    """The state at ``theta`` whose Hessian has weight ``h`` on each pair (lo, hi)."""
    n = theta.size
    diag = np.bincount(lo, h, n) + np.bincount(hi, h, n) + prior
    if n <= dense_limit:
        hess = np.zeros(n * n)
        np.add.at(hess, lo * n + hi, -h)  # repeated pairs add up
        hess = hess.reshape(n, n)
        hess = hess + hess.T
        hess[np.diag_indices(n)] = diag
        with _one_blas_thread():
            cov = _spd_inverse(hess)
        row_mean = cov.mean(axis=1)
        var = np.diag(cov) - 2.0 * row_mean + row_mean.mean()  # of the centred theta
    else:
        cov = None
        var = 1.0 / diag
    return AdaptiveState(
        theta=theta,
        games=games,
        var=np.maximum(var, 1e-12),
        cov=cov,
        precision_diag=diag,
        n_comparisons=n_comparisons,
    )


def _one_blas_thread() -> AbstractContextManager[object]:
    """One BLAS thread for a round's small dense inverse: on busy cores multithreaded
    OpenBLAS is 10-100x slower at these sizes (measured: a 100-thread estimate 6 s -> 0.8 s)."""
    return _BLAS.limit(limits=1, user_api="blas") if _BLAS is not None else nullcontext()


def _spd_inverse(matrix: np.ndarray) -> np.ndarray:
    """Inverse of a symmetric positive definite matrix by Cholesky (LAPACK potrf/potri):
    about 3x cheaper than a general inverse, which matters when refitting every round."""
    factor, info = dpotrf(matrix, lower=False, clean=True, overwrite_a=False)
    if info == 0:
        inv, info = dpotri(factor, lower=False, overwrite_c=True)
    if info != 0:  # not positive definite to machine precision: the general inverse
        return np.linalg.inv(matrix)
    upper = np.triu(inv)
    return upper + np.triu(upper, 1).T


def z_value(confidence: float, *, two_sided: bool) -> float:
    """The standard normal quantile for ``confidence`` (one- or two-sided)."""
    tail = (1.0 - confidence) / (2.0 if two_sided else 1.0)
    return float(-ndtri(tail))
