"""Davidson's tie model: Bradley-Terry with a fitted tie parameter nu.

    P(i beats j) = pi_i / D,  P(tie) = nu * sqrt(pi_i pi_j) / D,
    D = pi_i + pi_j + nu * sqrt(pi_i pi_j),  pi = exp(theta).

Given that the verdict is not a tie, P(i beats j) = expit(theta_i - theta_j), so theta is
on the same logit (and Elo) scale as the plain fit. nu = 0 is plain Bradley-Terry without
ties; larger nu means the judge calls more ties between equals (P(tie | equal) =
nu / (2 + nu)). The alternative "a tie is half a win" is ratings.bradley_terry.

The fit works on pair totals (wins of lo, wins of hi, ties) and is Newton's method on
(theta, log nu) with the Hessian applied matrix-free (bincount over pairs) inside CG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse.linalg import LinearOperator, cg
from scipy.stats import norm

from llmjudge.analysis.ratings import DEFAULT_LEVEL, DEFAULT_PRIOR


@dataclass(frozen=True, eq=False)
class DavidsonFit:
    theta: np.ndarray  # (players,) centred natural logits
    nu: float  # tie parameter; 0 when no verdict was a tie, inf when every one was
    nu_low: float | None  # Wald interval on log nu at `level`, mapped back
    nu_high: float | None
    level: float
    ties: float  # weighted count of tie verdicts
    comparisons: float  # weighted count of verdicts


def _pair_totals(
    a: np.ndarray, b: np.ndarray, score_a: np.ndarray, n: int, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keys, pair = np.unique(lo * n + hi, return_inverse=True)
    pair = pair.ravel()
    lo_score = np.where(a == lo, score_a, 1.0 - score_a)
    p = keys.size
    lo_wins = np.bincount(pair, weights * (lo_score == 1.0), p)
    hi_wins = np.bincount(pair, weights * (lo_score == 0.0), p)
    ties = np.bincount(pair, weights * (lo_score == 0.5), p)
    return keys // n, keys % n, lo_wins, hi_wins, ties


def fit_davidson(
    a: np.ndarray,
    b: np.ndarray,
    score_a: np.ndarray,
    n_players: int,
    *,
    weights: np.ndarray | None = None,
    prior: float = DEFAULT_PRIOR,
    level: float = DEFAULT_LEVEL,
    tol: float = 1e-8,
    max_iter: int = 200,
) -> DavidsonFit:
    """Maximum a posteriori theta (prior as in the plain fit) and maximum likelihood nu.

    `score_a` is 1 / 0 / 0.5 (tie) per verdict; `weights` counts each verdict.
    """
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    s = np.asarray(score_a, np.float64)
    w = np.ones(a.size) if weights is None else np.asarray(weights, np.float64)
    n = n_players
    lo, hi, w_lo, w_hi, t = _pair_totals(a, b, s, max(n, 1), w)
    games = w_lo + w_hi + t
    total_ties, total = float(t.sum()), float(games.sum())
    if n == 0 or total == 0:
        return DavidsonFit(np.zeros(n), 0.0, None, None, level, total_ties, total)
    if total_ties == total:
        # only ties: the likelihood grows without bound in nu and says nothing of theta
        return DavidsonFit(np.zeros(n), math.inf, None, None, level, total_ties, total)
    no_ties = total_ties == 0.0
    # log nu starts at the value that matches the tie rate between equals
    rate = min(max(total_ties / total, 1e-6), 1 - 1e-6)
    lam = -50.0 if no_ties else math.log(2.0 * rate / (1.0 - rate))
    theta = np.zeros(n)

    def parts(th: np.ndarray, lm: float) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        half = 0.5 * (th[lo] - th[hi])
        # log D stably: D = e^half + e^-half + e^lam
        top = np.maximum(np.abs(half), lm)
        log_d = top + np.log(np.exp(half - top) + np.exp(-half - top) + np.exp(lm - top))
        value = float(
            np.sum(games * log_d - (w_lo - w_hi) * half - t * lm) + 0.5 * prior * np.sum(th * th)
        )
        return value, np.exp(half - log_d), np.exp(-half - log_d), np.exp(lm - log_d)

    value, p_w, p_l, p_t = parts(theta, lam)
    fixed = 1 if no_ties else 0  # without ties nu is pinned at 0: fit theta only
    for _ in range(max_iter):
        # gradient of the negative log posterior w.r.t. d = theta_lo - theta_hi, and lam
        g_d = 0.5 * (games * (p_w - p_l) - (w_lo - w_hi))
        grad = np.concatenate(
            [np.bincount(lo, g_d, n) - np.bincount(hi, g_d, n) + prior * theta, [0.0]]
        )
        grad[n] = float(np.sum(games * p_t) - total_ties)
        h_dd = games * (0.25 * (p_w + p_l) - 0.25 * (p_w - p_l) ** 2)
        h_dl = -0.5 * games * (p_w - p_l) * p_t
        cross = np.bincount(lo, h_dl, n) - np.bincount(hi, h_dl, n)
        h_ll = float(np.sum(games * p_t * (1.0 - p_t))) + (1.0 if fixed else 0.0)

        def matvec(
            v: np.ndarray, h_dd: np.ndarray = h_dd, cross: np.ndarray = cross, h_ll: float = h_ll
        ) -> np.ndarray:
            vt, vl = v[:n], v[n]
            u = h_dd * (vt[lo] - vt[hi])
            out_t = np.bincount(lo, u, n) - np.bincount(hi, u, n) + prior * vt
            if fixed:
                return np.concatenate([out_t, [vl]])
            return np.concatenate([out_t + cross * vl, [cross @ vt + h_ll * vl]])

        diag = np.concatenate([np.bincount(lo, h_dd, n) + np.bincount(hi, h_dd, n) + prior, [h_ll]])
        if fixed:
            grad[n] = 0.0
        op = LinearOperator((n + 1, n + 1), matvec=matvec, dtype=np.float64)
        jac = LinearOperator((n + 1, n + 1), matvec=lambda v, d=diag: v / d, dtype=np.float64)
        step, _ = cg(op, -grad, M=jac, rtol=1e-10, maxiter=2_000)
        if np.max(np.abs(step)) < tol:
            theta, lam = theta + step[:n], lam + step[n]
            value, p_w, p_l, p_t = parts(theta, lam)
            break
        slope = float(grad @ step)
        t_step = 1.0
        while t_step >= 1e-8:
            cand_t, cand_l = theta + t_step * step[:n], lam + t_step * step[n]
            new = parts(cand_t, cand_l)
            if new[0] <= value + 1e-4 * t_step * slope:
                theta, lam = cand_t, cand_l
                value, p_w, p_l, p_t = new
                break
            t_step *= 0.5
        else:
            break
    if no_ties:
        return DavidsonFit(theta - theta.mean(), 0.0, None, None, level, 0.0, total)
    # Wald interval on log nu: its variance is 1 / the Schur complement of the theta block
    h_dd = games * (0.25 * (p_w + p_l) - 0.25 * (p_w - p_l) ** 2)
    h_dl = -0.5 * games * (p_w - p_l) * p_t
    cross = np.bincount(lo, h_dl, n) - np.bincount(hi, h_dl, n)
    diag = np.bincount(lo, h_dd, n) + np.bincount(hi, h_dd, n) + prior

    def theta_block(v: np.ndarray) -> np.ndarray:
        u = h_dd * (v[lo] - v[hi])
        return np.bincount(lo, u, n) - np.bincount(hi, u, n) + prior * v

    solved, _ = cg(
        LinearOperator((n, n), matvec=theta_block, dtype=np.float64),
        cross,
        M=LinearOperator((n, n), matvec=lambda v: v / diag, dtype=np.float64),
        rtol=1e-10,
        maxiter=2_000,
    )
    schur = float(np.sum(games * p_t * (1.0 - p_t)) - cross @ solved)
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


def davidson_probabilities(
    theta_a: np.ndarray, theta_b: np.ndarray, nu: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P(a wins), P(b wins), P(tie)) under Davidson's model."""
    half = 0.5 * (np.asarray(theta_a) - np.asarray(theta_b))
    d = np.exp(half) + np.exp(-half) + nu
    return np.exp(half) / d, np.exp(-half) / d, nu / d
