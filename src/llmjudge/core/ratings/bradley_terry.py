"""The Bradley-Terry solver: a penalised Newton fit on pair totals, and its bootstrap.

Outcomes are grouped by pair (:class:`PairIndex`); the bootstrap resamples comparisons
i.i.d. or by cluster.

Model: P(i beats j) = 1 / (1 + exp(theta_j - theta_i)); a tie counts as half a win to each
side. The fit maximises the log-likelihood plus a Gaussian prior N(0, 1/prior) on each
theta (an L2 penalty prior/2 * sum(theta^2)). The default prior of 0.5 is the quadratic
approximation of two drawn games against an average player (each drawn game has curvature
1/4 at theta = 0), the virtual games of BayesElo and Whole-History Rating: a standard
deviation of sqrt(2) logits, about 246 Elo points. It keeps a thread that never lost (or
never won) finite: of two players, one that won all n games ends at most
max(2, ln(n / prior)) logits above the other, where the old 0.01 let a near-separable demo spread
six models over 3,000 points (issue 27). Beside a player's data it weighs as two games,
which is negligible for a pillar with hundreds of verdicts. It also makes the problem
strictly concave, so threads in disconnected groups are still comparable (each group is
centred on the common mean).

The solver is Newton's method with the Hessian applied matrix-free (np.bincount over the
unique pairs) inside Jacobi-preconditioned conjugate gradients, with a backtracking line
search: memory O(threads + comparisons), no threads x threads matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.sparse import _sparsetools, csr_array
from scipy.special import expit

# two virtual drawn games against the mean player, sd sqrt(2) logits (module docstring)
DEFAULT_PRIOR = 0.5
DEFAULT_BOOTSTRAP_ROUNDS = 200


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

    @cached_property
    def _with_diagonal(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, indices, entry_pair, diagonal slots) of the CSR pattern with the
        diagonal in its sorted place: each Laplacian is one fill of its values."""
        n = self.n_players
        rows = np.repeat(np.arange(n), np.diff(self.indptr))
        keys = np.concatenate([rows * n + self.indices, np.arange(n) * (n + 1)])
        order = np.argsort(keys, kind="stable")
        source = np.concatenate([self.entry_pair, np.full(n, -1)])[order]
        counts = np.diff(self.indptr) + 1
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        indices = (keys[order] % max(n, 1)).astype(np.int32)
        return indptr, indices, source, np.flatnonzero(source < 0)

    def laplacian(self, h: np.ndarray, prior: float) -> tuple[csr_array, np.ndarray]:
        """(L, diag L): the weighted graph Laplacian with weight h per pair plus prior * I,
        the Hessian of every pairwise logit model here in theta.

        Filled into a pattern built once (an `off + diag` sum rebuilt the matrix every
        Newton step: most of a small style fit; issue 27). Pairs of weight 0 keep an
        explicit zero where the sum dropped them: every product is the same to the bit
        (adding 0 * x to a finite sum changes nothing)."""
        n = self.n_players
        diag = np.bincount(self.lo, h, n) + np.bincount(self.hi, h, n) + prior
        indptr, indices, source, slots = self._with_diagonal
        data = -h[source]
        data[slots] = diag
        return csr_array((data, indices, indptr), shape=(n, n)), diag

    def totals(self, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(wins of lo, games) per pair; `weights` counts each outcome (bootstrap)."""
        p = self.lo.size
        lo_weights = self.lo_score if weights is None else self.lo_score * weights
        wins = np.bincount(self.row_pair, weights=lo_weights, minlength=p)
        games = np.bincount(self.row_pair, weights=weights, minlength=p).astype(np.float64)
        return wins, games


def csr_product(matrix: csr_array) -> Callable[[np.ndarray], np.ndarray]:
    """`matrix @ x` for a float vector or (n, k) block: scipy's own kernels, chosen as its
    dispatch chooses them (one column goes through the vector kernel), so the results
    are the same to the bit, without the dispatch that outweighed a small product."""
    rows, cols = matrix.shape
    indptr, indices, data = matrix.indptr, matrix.indices, matrix.data

    def product(x: np.ndarray) -> np.ndarray:
        if x.ndim == 1 or x.shape[1] == 1:
            out = np.zeros(rows)
            _sparsetools.csr_matvec(rows, cols, indptr, indices, data, x.ravel(), out)
            return out if x.ndim == 1 else out.reshape(-1, 1)
        block = np.zeros((rows, x.shape[1]))
        _sparsetools.csr_matvecs(
            rows, cols, x.shape[1], indptr, indices, data, x.ravel(), block.ravel()
        )
        return block

    return product


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
    them all, which is several times faster than one sparse product per column. Sums are
    the method's (`x.sum(axis=0)`: the same reduction as np.sum without its wrapper)."""
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = r / diag[:, None]
    p = z.copy()
    rz = (r * z).sum(axis=0)
    stop = rtol * np.sqrt((rhs * rhs).sum(axis=0))
    for _ in range(maxiter):
        active = np.sqrt((r * r).sum(axis=0)) > stop
        if not active.any():
            break
        q = matmat(p)
        pq = (p * q).sum(axis=0)
        alpha = np.where(active & (pq > 0), rz / np.where(pq > 0, pq, 1.0), 0.0)
        x += alpha * p
        r -= alpha * q
        z = r / diag[:, None]
        rz_new = (r * z).sum(axis=0)
        beta = np.where(active, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
        p = z + beta * p
        rz = rz_new
    return x


def _jacobi_cg(
    diag: np.ndarray,
    pairs: PairIndex,
    off_data: np.ndarray,
    b: np.ndarray,
    *,
    rtol: float,
    maxiter: int,
) -> np.ndarray:
    """scipy.sparse.linalg.cg on (diag(diag) + off_diag) x = b with the Jacobi
    preconditioner, off_diag the CSR matrix of `off_data` in `pairs`' pattern: the same
    iteration, operation for operation (the same answers to the last bit), without its
    LinearOperator and input checks, whose overhead was most of a fit of a few players (a
    pillar ranking's 200 bootstrap fits; issue 27). The product calls the kernel that
    `csr_array @ vector` calls and the norms are numpy's (sqrt of the dot), without their
    dispatch, which cost more than the arithmetic below ~100 players."""
    bnrm2 = math.sqrt(b.dot(b))
    atol = max(0.0, float(rtol) * float(bnrm2))
    if bnrm2 == 0:
        return b
    n = b.size
    matvec, indptr, indices = _sparsetools.csr_matvec, pairs.indptr, pairs.indices
    x = np.zeros_like(b)
    r = b.copy()
    rho_prev = 1.0
    p = np.empty_like(r)
    for iteration in range(maxiter):
        if math.sqrt(r.dot(r)) < atol:
            break
        z = r / diag
        rho_cur = np.dot(r, z)
        if iteration > 0:
            p *= rho_cur / rho_prev
            p += z
        else:
            p[:] = z
        product = np.zeros(n)
        matvec(n, n, indptr, indices, off_data, p, product)
        q = diag * p + product
        alpha = rho_cur / np.dot(p, q)
        x += alpha * p
        r -= alpha * q
        rho_prev = rho_cur
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
        # the same pattern every iteration: new weights only
        step = _jacobi_cg(diag, pairs, -h[pairs.entry_pair], -grad, rtol=cg_rtol, maxiter=500)
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
    replacement and warm-started from the point estimate: the cluster bootstrap with one
    cluster per comparison.

    A thread absent from a resample falls back to the prior mean there, which widens the
    interval of rarely compared threads, as their uncertainty warrants.
    """
    clusters = np.arange(pairs.row_pair.size, dtype=np.int64)
    return cluster_bootstrap_bradley_terry(
        pairs, theta_hat, clusters, rounds=rounds, seed=seed, prior=prior
    )


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
    if np.asarray(clusters).size != pairs.row_pair.size:
        raise ValueError("one cluster id per comparison")
    samples = np.empty((rounds, pairs.n_players))
    for i, row_weights in enumerate(cluster_resamples(clusters, rounds, seed, weights)):
        wins, games = pairs.totals(row_weights)
        samples[i] = fit_bradley_terry(
            pairs, wins, games, prior=prior, init=theta_hat, tol=1e-4, cg_rtol=1e-3
        )
    return samples


def cluster_resamples(
    clusters: np.ndarray, rounds: int, seed: int, weights: np.ndarray | None = None
) -> Iterator[np.ndarray]:
    """(m,) row weights of each of ``rounds`` cluster resamples: how often each row's
    cluster was drawn (with replacement, as many draws as clusters) times its ``weights``.
    Every cluster bootstrap (Bradley-Terry, Davidson, style control) draws through this,
    so one seed gives them the same resamples."""
    clusters = np.asarray(clusters, dtype=np.int64)
    n_clusters = int(clusters.max()) + 1 if clusters.size else 0
    base = np.ones(clusters.size) if weights is None else np.asarray(weights, np.float64)
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        counts = np.bincount(rng.integers(0, n_clusters, n_clusters), minlength=n_clusters)
        yield base * counts[clusters]
