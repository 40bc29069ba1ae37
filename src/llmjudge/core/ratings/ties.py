"""Davidson's tie model: Bradley-Terry with a fitted tie parameter nu.

    P(i beats j) = pi_i / D,  P(tie) = nu * sqrt(pi_i pi_j) / D,
    D = pi_i + pi_j + nu * sqrt(pi_i pi_j),  pi = exp(theta).

Given that the verdict is not a tie, P(i beats j) = expit(theta_i - theta_j), so theta is
on the same logit (and Elo) scale as the plain fit. nu = 0 is plain Bradley-Terry without
ties; larger nu means the judge calls more ties between equals (P(tie | equal) =
nu / (2 + nu)). The alternative "a tie is half a win" is ratings.bradley_terry.

The fit works on pair totals (wins of lo, wins of hi, ties) and is Newton's method on
(theta, log nu), solved through the Schur complement of the sparse thread Laplacian.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_array
from scipy.stats import norm

from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR, PairIndex, block_pcg, csr_product
from llmjudge.core.ratings.intervals import DEFAULT_LEVEL


@dataclass(frozen=True, eq=False)
class DavidsonFit:
    theta: np.ndarray  # (players,) centred natural logits
    nu: float  # tie parameter; 0 when no verdict was a tie, inf when every one was
    nu_low: float | None  # Wald interval on log nu at `level`, mapped back
    nu_high: float | None
    level: float
    ties: float  # weighted count of tie verdicts
    comparisons: float  # weighted count of verdicts


def fit_davidson(
    a: np.ndarray,
    b: np.ndarray,
    score_a: np.ndarray,
    n_players: int,
    *,
    weights: np.ndarray | None = None,
    prior: float = DEFAULT_PRIOR,
    level: float = DEFAULT_LEVEL,
    tol: float = 1e-7,
    max_iter: int = 200,
    pairs: PairIndex | None = None,
) -> DavidsonFit:
    """Maximum a posteriori theta (prior as in the plain fit) and maximum likelihood nu.

    `score_a` is 1 / 0 / 0.5 (tie) per verdict; `weights` counts each verdict. Each
    Newton step solves the (theta, log nu) system by its Schur complement: one block CG
    on the sparse thread Laplacian for two right-hand sides, then a scalar.
    """
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    s = np.asarray(score_a, np.float64)
    w = np.ones(a.size) if weights is None else np.asarray(weights, np.float64)
    n = n_players
    if n == 0 or a.size == 0:
        return DavidsonFit(np.zeros(n), 0.0, None, None, level, 0.0, float(w.sum()))
    pairs = PairIndex.build(a, b, s, n) if pairs is None else pairs
    lo, hi, p = pairs.lo, pairs.hi, pairs.lo.size
    w_lo = np.bincount(pairs.row_pair, w * (pairs.lo_score == 1.0), p)
    w_hi = np.bincount(pairs.row_pair, w * (pairs.lo_score == 0.0), p)
    t = np.bincount(pairs.row_pair, w * (pairs.lo_score == 0.5), p)
    games = w_lo + w_hi + t
    total_ties, total = float(t.sum()), float(games.sum())
    if total_ties == total:
        # only ties: the likelihood grows without bound in nu and says nothing of theta
        return DavidsonFit(np.zeros(n), math.inf, None, None, level, total_ties, total)
    no_ties = total_ties == 0.0
    # log nu starts where it matches the tie rate between equals; without ties nu is
    # pinned at 0 (the fit is plain Bradley-Terry)
    rate = min(max(total_ties / total, 1e-6), 1 - 1e-6)
    lam = -math.inf if no_ties else math.log(2.0 * rate / (1.0 - rate))
    theta = np.zeros(n)

    def parts(th: np.ndarray, lm: float) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        half = 0.5 * (th[lo] - th[hi])
        # log D stably: D = e^half + e^-half + e^lam
        top = np.maximum(np.abs(half), lm)
        log_d = top + np.log(np.exp(half - top) + np.exp(-half - top) + np.exp(lm - top))
        value = np.sum(games * log_d - (w_lo - w_hi) * half) - (0.0 if no_ties else total_ties * lm)
        value += 0.5 * prior * th @ th
        return float(value), np.exp(half - log_d), np.exp(-half - log_d), np.exp(lm - log_d)

    def curvature(
        p_w: np.ndarray, p_l: np.ndarray, p_t: np.ndarray
    ) -> tuple[csr_array, np.ndarray, np.ndarray, float]:
        h_dd = games * (0.25 * (p_w + p_l) - 0.25 * (p_w - p_l) ** 2)
        h_dl = -0.5 * games * (p_w - p_l) * p_t
        laplacian, diag = pairs.laplacian(h_dd, prior)
        cross = np.bincount(lo, h_dl, n) - np.bincount(hi, h_dl, n)
        return laplacian, diag, cross, float(np.sum(games * p_t * (1.0 - p_t)))

    value, p_w, p_l, p_t = parts(theta, lam)
    for _ in range(max_iter):
        g_d = 0.5 * (games * (p_w - p_l) - (w_lo - w_hi))
        g_theta = np.bincount(lo, g_d, n) - np.bincount(hi, g_d, n) + prior * theta
        g_lam = 0.0 if no_ties else float(np.sum(games * p_t) - total_ties)
        laplacian, diag, cross, h_ll = curvature(p_w, p_l, p_t)
        solved = block_pcg(
            csr_product(laplacian), np.column_stack([g_theta, cross]), diag, rtol=1e-9
        )
        if no_ties:
            d_lam, d_theta = 0.0, -solved[:, 0]
        else:
            # Schur complement of the theta block: a scalar equation for log nu
            d_lam = (cross @ solved[:, 0] - g_lam) / (h_ll - cross @ solved[:, 1])
            d_theta = -solved[:, 0] - solved[:, 1] * d_lam
        if max(np.max(np.abs(d_theta)), abs(d_lam)) < tol:
            theta, lam = theta + d_theta, lam + d_lam
            value, p_w, p_l, p_t = parts(theta, lam)
            break
        slope = float(g_theta @ d_theta + g_lam * d_lam)
        step = 1.0
        while step >= 1e-8:
            cand_t, cand_l = theta + step * d_theta, lam + step * d_lam
            new = parts(cand_t, cand_l)
            if new[0] <= value + 1e-4 * step * slope:
                theta, lam = cand_t, cand_l
                value, p_w, p_l, p_t = new
                break
            step *= 0.5
        else:
            break
    if no_ties:
        return DavidsonFit(theta - theta.mean(), 0.0, None, None, level, 0.0, total)
    # Wald interval on log nu: its variance is 1 / the Schur complement at the optimum
    laplacian, diag, cross, h_ll = curvature(p_w, p_l, p_t)
    solved = block_pcg(csr_product(laplacian), cross[:, None], diag, rtol=1e-10)[:, 0]
    schur = h_ll - float(cross @ solved)
    z = float(norm.ppf(0.5 + level / 2.0))
    se = 1.0 / math.sqrt(schur) if schur > 0 else math.inf
    return DavidsonFit(
        theta=theta - theta.mean(),
        nu=math.exp(lam),
        nu_low=math.exp(lam - z * se),
        nu_high=math.exp(lam + z * se) if math.isfinite(se) else None,
        level=level,
        ties=total_ties,
        comparisons=total,
    )
